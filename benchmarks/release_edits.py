"""Build the release next-edit set: next-edit cases cut from consecutive releases of PyPI packages.

    python benchmarks/release_edits.py --out runs/release_edits
    edit-engine eval --benchmark next-edit-releases --data runs/release_edits [--fill engine|patterns|rename-baseline]

A held-out set for ``Engine.next_edit``: the changes between consecutive pinned releases of six pure-Python
packages with small, frequent releases. None of them is a repository the shared next-edit set comes from
(``../shared/benchmarks/next-edit/README.md``), none is installed here, none is in the real-code set or the
algorithm corpus. Each release is the wheel ``pip download --no-deps --only-binary :all:`` fetches, checked
against the sha256 pinned below (a download that differs stops the build).

Steps: download every pinned release into ``OUT/downloads``; read each wheel's ``.py`` files (not
``*.dist-info``) as UTF-8; for each consecutive pair of a package's releases, cut the cases of every changed
file (``edit_engine.eval.release_edits``: difflib hunks, the earlier ones as the history, the next one nearby
as the target, in the shared set's fields plus ``package``, ``old_version``, ``new_version``); select at most
60 per package (seeded). Writes ``OUT/cases.jsonl.gz`` and ``OUT/manifest.json`` (Python and pip versions,
each wheel's file name, size and sha256, the case counts per package and pair, the cases file's sha256).
Running it again writes the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from edit_engine.eval import release_edits

# package -> consecutive releases, each with the sha256 of its wheel
RELEASES: dict[str, tuple[tuple[str, str], ...]] = {
    "arrow": (
        ("1.0.3", "3515630f11a15c61dcb4cdd245883270dd334c83f3e639824e65a4b79cc48543"),
        ("1.1.0", "8cbe6a629b1c54ae11b52d6d9e70890089241958f63bc59467e277e34b7a5378"),
        ("1.1.1", "77a60a4db5766d900a2085ce9074c5c7b8e2c99afeaa98ad627637ff6f292510"),
        ("1.2.0", "8fb7d9d3d4bf90e49e734c22fa077bdd0964135c4b8120de2510575a8d1f620c"),
        ("1.2.1", "6b2914ef3997d1fd7b37a71ce9dd61a6e329d09e1c7b44f4d3099ca4a5c0933e"),
        ("1.2.2", "d622c46ca681b5b3e3574fcb60a04e5cc81b9625112d5fb2b44220c36c892177"),
        ("1.2.3", "5a49ab92e3b7b71d96cd6bfcc4df14efefc9dfa96ea19045815914a6ab6b1fe2"),
        ("1.3.0", "c728b120ebc00eb84e01882a6f5e7927a53960aa990ce7dd2b10f39005a67f80"),
        ("1.4.0", "749f0769958ebdc79c173ff0b0670d59051a535fa26e8eba02953dc19eb43205"),
    ),
    "cachetools": (
        ("7.0.0", "d52fef60e6e964a1969cfb61ccf6242a801b432790fe520d78720d757c81cbd2"),
        ("7.0.1", "8f086515c254d5664ae2146d14fc7f65c9a4bce75152eb247e5a9c5e6d7b2ecf"),
        ("7.0.2", "938dcad184827c5e94928c4fd5526e2b46692b7fb1ae94472da9131d0299343c"),
        ("7.0.3", "c128ffca156eef344c25fcd08a96a5952803786fa33097f5f2d49edf76f79d53"),
        ("7.0.4", "0c8bb1b9ec8194fa4d764accfde602dfe52f70d0f311e62792d4c3f8c051b1e9"),
        ("7.0.5", "46bc8ebefbe485407621d0a4264b23c080cedd913921bad7ac3ed2f26c183114"),
        ("7.0.6", "4e94956cfdd3086f12042cdd29318f5ced3893014f7d0d059bf3ead3f85b7f8b"),
        ("7.1.0", "05afd1d309309e7c8971db462b4cf516d93fa8c9aea1b906e26e61b4399d0d82"),
        ("7.1.1", "0335cd7a0952d2b22327441fb0628139e234c565559eeb91a8a4ac7551c5353d"),
        ("7.1.2", "89386be5bece29963e0f22bb7e1aba91c8395c7ad107780e2ce7af3ab315ae40"),
        ("7.1.3", "9876787e2346e20584d5cca236cb5d49d04e7193de91646f230725b2e1e8b804"),
        ("7.1.4", "323dc4127934744db5b54eb4924482d7edafbf9554e820d1531c2e08c0e4ef54"),
        ("7.1.5", "900cda61ff34fafca2b7f78cfd2a91e2d4f9655c19309ef542ce0a04f91e6cd9"),
        ("7.1.6", "2c12e255780330af28b91bb7fb96cce4c766f04e38396b9a24510190a5827096"),
        ("7.1.7", "ef98ef375ad188819ef2f9b3645e3987f4b8c5b7550e436ad998c2de78296df0"),
        ("7.1.8", "a81e3844acaa7355b6567f97bd67a94a14ec3a9bc2cbbdae45b9592cc036775b"),
        ("7.2.0", "3045213f186b89fdd95d94441354c4bd87c570b7a38d8c3fd1d9dd37f6dc90d8"),
        ("7.2.1", "63aa53dfe7473c10cccdd5a01dedf76ef2c4b73a58840d9396e7d0752cbdac3b"),
        ("7.2.2", "39b6c9291adde28c5de6622d25329375fadf3e8a678226e7872e2e72854e4549"),
        ("7.2.3", "85ef9d2703918bedf7f88caa0b06bb3bb7a71360eb0b05c20796b89fede6e30c"),
        ("7.2.4", "4cfbebf3eec4040d2073b19c460511ad47eef7b852dbf9a0d385099b4dafa31e"),
        ("7.2.5", "9033308cc26b678784a27b096aab1541b9e698d785c3e9918b691ccd458d88df"),
        ("7.2.6", "8722e08fc36ae0838a9a0a2ab9935554720de3343a62dad7aae7c595854c8623"),
        ("7.2.7", "88e6b53373a96786d20894fed9ce623ae5b73cbc07421b7a73098db088be69ae"),
        ("7.2.8", "09b04a85741d0019b3fb7d02b7ee9933a422fa6923af92a0fd63b893b695830c"),
        ("7.3.0", "2105787c94619bde7072624fec0fe7b8a08bb7bf6c757c318f8925573c6f07c9"),
        ("7.3.1", "0a2c9cfc6c6556161570c06d52b8939734d316ccf7ecad158fdb34b300808fce"),
        ("7.3.2", "afb4b563cb37e7a121a6ea45a0deec42916c64eed58875cc15d8cf9eaca89fb2"),
        ("7.3.3", "32305addec0581cae6d4f7952d01d078dbc521f922650eba395b9d25b7481843"),
        ("8.0.0", "5af562e5078f0086771a1e3832a9c3dbf5d336b6e2794a2c12a64680a4c9087d"),
        ("8.0.1", "9e54fbdef4b24e8059e8a430893122febbaf9f5673f236fdb82256cdd090d506"),
        ("8.0.2", "502bf3c17c6e35d78ccdaa70da8c7001b28634541f5cde0dee33c93bb252277d"),
    ),
    "natsort": (
        ("8.0.0", "5f5f4ea471d655b1b1611eef1cf0c6d3397095d2d3a1aab7098d6a50e4c3901a"),
        ("8.0.1", "c504a229c38926e047e9c3952a08920bc585efb62d7d160514ace9898b00ac0b"),
        ("8.0.2", "09cff3cabb617f9794f643758ab5b337c1c0af1a6df11edf5c04de496fd7fb26"),
        ("8.1.0", "f59988d2f24e77b6b56f8a8f882d5df6b3b637e09e075abc67b486d59fba1a4b"),
        ("8.2.0", "04fe18fdd2b9e5957f19f687eb117f102ef8dde6b574764e536e91194bed4f5f"),
        ("8.3.0", "6c15c663d3fc57dd2af52a56ffa06e9fdf2edfcf8d2e129bf115941a7aeec61e"),
        ("8.3.1", "d583bc9050dd10538de36297c960b93f873f0cd01671a3c50df5bd86dd391dcb"),
        ("8.4.0", "4732914fb471f56b5cce04d7bae6f164a592c7712e1c85f9ef585e197299521c"),
    ),
    "sqlparse": (
        ("0.4.4", "5430a4fe2ac7d0f93e66f1efc6e1338a41884b7ddf2a350cedd20ccc4d9d28f3"),
        ("0.5.0", "c204494cd97479d0e39f28c93d46c0b2d5959c7b9ab904762ea6c7af211c8663"),
        ("0.5.1", "773dcbf9a5ab44a090f3441e2180efe2560220203dc2f8c0b0fa141e18b505e4"),
        ("0.5.2", "e99bc85c78160918c3e1d9230834ab8d80fc06c59d03f8db2618f65f65dda55e"),
        ("0.5.3", "cf2196ed3418f3ba5de6af7e82c694a9fbdbfecccdfc72e281548517081f16ca"),
        ("0.5.4", "99a9f0314977b76d776a0fcb8554de91b9bb8a18560631d6bc48721d07023dcb"),
        ("0.5.5", "12a08b3bf3eec877c519589833aed092e2444e68240a3577e8e26148acc7b1ba"),
        ("0.6.0", "b861c0288ce2fa56209a9a6412d2e066ac664b3873b89c26c9d8415e8e32996f"),
        ("0.6.1", "3be5a72d04c873d690d7c6dedd33d6fae2ef82759881ceec02fc2efd0cba564f"),
    ),
    "tenacity": (
        ("8.2.3", "ce510e327a630c9e1beaf17d42e6ffacc88185044ad85cf74c0a8887c6a0f88c"),
        ("8.3.0", "3649f6443dbc0d9b01b9d8020a9c4ec7a1ff5f6f3c6c8a036ef371f573fe9185"),
        ("8.4.0", "6c72aeb4d300b9858be0d52f1894ee952f0b391ec583cdc19c2523030efcc4eb"),
        ("8.4.1", "28522e692eda3e1b8f5e99c51464efcc0b9fc86933da92415168bc1c4e2308fa"),
        ("8.4.2", "9e6f7cf7da729125c7437222f8a522279751cdfbe6b67bfe64f75d3a348661b2"),
        ("8.5.0", "b594c2a5945830c267ce6b79a166228323ed52718f30302c1359836112346687"),
        ("9.0.0", "93de0c98785b27fcf659856aa9f54bfbd399e29969b0621bc7f762bd441b4539"),
        ("9.1.2", "f77bf36710d8b73a50b2dd155c97b870017ad21afe6ab300326b0371b3b05138"),
        ("9.1.3", "51171cfc6b8a7826551e2f029426b10a6af189c5ac6986adcd7eb36d42f17954"),
        ("9.1.4", "6095a360c919085f28c6527de529e76a06ad89b23659fa881ae0649b867a9d55"),
        ("9.2.1", "9e56f17539296baab7beabb08b92f6ee3d7be92d8be72d763360677c2ad6580e"),
    ),
    "validators": (
        ("0.28.0", "e0184691dea3ba82b52c161ba81d3ec1d8be8da9609f0137d1430b395b366521"),
        ("0.28.1", "890c98789ad884037f059af6ea915ec2d667129d509180c2c590b8009a4c4219"),
        ("0.28.2", "3e9dce98013255ddf44620dfc9f3604492fde9eb835576d72cc00a4916cb84dd"),
        ("0.28.3", "53cafa854f13850156259d9cc479b864ee901f6a96e6b109e6fc33f98f37d99f"),
        ("0.29.0", "31a8285ca8889347babad77cc541f0b88e95b30553ca5f69b1d3ae4351587e3e"),
        ("0.30.0", "0f2387a9fe76d26c151ab716de18e34467413800abced256fd3a506f4f51cbdc"),
        ("0.31.0", "e15a600d81555a4cd409b17bf55946c5edec7748e776afc85ed0a19bdee54e56"),
        ("0.32.0", "e9ce1703afb0adf7724b0f98e4081d9d10e88fa5d37254d21e41f27774c020cd"),
        ("0.33.0", "134b586a98894f8139865953899fc2daeb3d0c35569552c5518f089ae43ed075"),
        ("0.34.0", "c804b476e3e6d3786fa07a30073a4ef694e617805eb1946ceee3fe5a9b8b1321"),
        ("0.35.0", "e8c947097eae7892cb3d26868d637f79f47b4a0554bc6b80065dfe5aac3705dd"),
        ("0.36.0", "c52ad00435e385b95fa4d6dd3081cb20c0660e7fd07b214523c8584dd2edba34"),
    ),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(name: str, version: str, digest: str, dest: Path) -> Path:
    """The release's wheel in ``dest`` (pip download, no dependencies), its sha256 checked."""
    dest.mkdir(parents=True, exist_ok=True)
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "--dest", str(dest), f"{name}=={version}"], check=True)
        found = sorted(dest.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"expected one wheel of {name}=={version} in {dest}, found {found}")
    got = sha256(found[0])
    if got != digest:
        raise SystemExit(f"{found[0].name}: sha256 {got}, pinned {digest}")
    return found[0]


def wheel_sources(wheel: Path) -> dict[str, str]:
    """The wheel's ``.py`` files that decode as UTF-8, by path inside it."""
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            top = info.filename.split("/", 1)[0]
            if not info.filename.endswith(".py") or top.endswith((".dist-info", ".data")):
                continue
            try:
                out[info.filename] = z.read(info).decode("utf-8")
            except UnicodeDecodeError:
                continue
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (cases.jsonl.gz, manifest.json, downloads/)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    downloads: list[dict[str, object]] = []
    cases: list[dict[str, object]] = []
    pairs: list[dict[str, object]] = []
    for name, releases in RELEASES.items():
        trees = []
        for version, digest in releases:
            wheel = download(name, version, digest, out / "downloads")
            downloads.append({"package": name, "version": version, "file": wheel.name,
                              "bytes": wheel.stat().st_size, "sha256": digest})
            trees.append((version, wheel_sources(wheel)))
        for old, new in zip(trees, trees[1:], strict=False):
            got = release_edits.pair_cases(name, old, new)
            changed = sum(1 for p in set(old[1]) & set(new[1]) if old[1][p] != new[1][p])
            pairs.append({"package": name, "old": old[0], "new": new[0], "changed_files": changed,
                          "cases": len(got)})
            cases += got
    chosen = release_edits.select(cases)  # type: ignore[arg-type]
    path = release_edits.write_cases(chosen, out)
    per_package = {n: sum(c["package"] == n for c in chosen) for n in RELEASES}
    manifest = {
        "python": platform.python_version(), "pip": metadata.version("pip"),
        "rule": {k: getattr(release_edits, k) for k in ("MAX_FILE_BYTES", "MAX_HUNK_ROWS", "MAX_HISTORY", "MAX_GAP",
                                                        "FAR", "PER_FILE", "PER_PACKAGE", "SEED")},
        "downloads": downloads, "pairs": pairs, "candidates": len(cases), "cases": len(chosen),
        "far": sum(bool(c["far"]) for c in chosen), "per_package": per_package,
        "cases_file": path.name, "cases_sha256": sha256(path),
    }
    (out / release_edits.MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(f"{len(chosen)} cases ({manifest['far']} far) from {len(cases)} candidates: "
          + ", ".join(f"{n} {k}" for n, k in per_package.items()))
    print(f"{path}  sha256 {manifest['cases_sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
