"""Build the release next-edit sets: next-edit cases cut from consecutive releases of PyPI packages.

    python benchmarks/release_edits.py --out runs/release_edits
    edit-engine eval --benchmark next-edit-releases --data runs/release_edits [--fill engine|patterns|rename-baseline]
    python benchmarks/release_edits.py --set train --out runs/edit_train_releases

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

``--set train`` builds the training set instead: cases for training the edit model, never for evaluating it.
The same steps on the packages of ``TRAIN_RELEASES`` (33 pure-Python packages, 5 to 10 releases each, in order
and mostly consecutive patch and minor ones; a few skip a release), with two differences: the selection only drops duplicates (no cap per
package; still at most ``PER_FILE`` cases per file version pair, as in the evaluation set, so that one large
change cannot fill the set), and the manifest says ``"set": "train"``. The build stops before downloading
anything when a training package is one the model is scored on (``HELD_OUT``: the evaluation set's packages,
the shared next-edit set's repositories, the real-code set's packages; names compared normalised).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import subprocess
import sys
from collections.abc import Iterable
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


# Training packages -> consecutive releases, each with the sha256 of its wheel (the train set: never evaluated on)
TRAIN_RELEASES: dict[str, tuple[tuple[str, str], ...]] = {
    "anyio": (
        ("4.0.0", "cfdb2b588b9fc25ede96d8db56ed50848b0b649dca3dd1df0b11f683bb9e0b5f"),
        ("4.1.0", "56a415fbc462291813a94528a779597226619c8e78af7de0507333f700011e5f"),
        ("4.2.0", "745843b39e829e108e518c489b31dc757de7d2131d53fac32bd8df268227bfee"),
        ("4.3.0", "048e05d0f6caeed70d731f3db756d35dcc1f35747c8c403364a8332c630441b8"),
        ("4.4.0", "c1b2d8f46a8a812513012e1107cb0e68c17159a7a594208005a57dc776e1bdc7"),
        ("4.5.0", "fdeb095b7cc5a5563175eedd926ec4ae55413bb4be5770c424af0ba46ccb4a78"),
        ("4.6.0", "c7d2e9d63e31599eeb636c8c5c03a7e108d73b345f064f1c19fdc87b79036a9a"),
    ),
    "astroid": (
        ("2.15.0", "e3e4d0ffc2d15d954065579689c36aac57a339a4679a679579af6401db4d3fdb"),
        ("2.15.1", "89860bda98fe2bbd1f5d262229be7629d778ce280de68d95d4a73d1f592ad268"),
        ("2.15.2", "dea89d9f99f491c66ac9c04ebddf91e4acf8bd711722175fe6245c0725cc19bb"),
        ("2.15.3", "f11e74658da0f2a14a8d19776a8647900870a63de71db83713a8e77a6af52662"),
        ("2.15.4", "a1b8543ef9d36ea777194bc9b17f5f8678d2c56ee6a45b2c2f17eec96f242347"),
        ("2.15.5", "078e5212f9885fa85fbb0cf0101978a336190aadea6e13305409d099f71b2324"),
        ("2.15.6", "389656ca57b6108f939cf5d2f9a2a825a3be50ba9d589670f393236e0a03b91c"),
        ("2.15.7", "958f280532e36ca84a13023f15cb1556fb6792d193acb87e1f3ca536b6fa6bd2"),
        ("2.15.8", "1aa149fc5c6589e3d0ece885b4491acd80af4f087baafa3fb5203b113e68cd3c"),
    ),
    "charset-normalizer": (
        ("2.0.4", "0c8911edd15d19223366a194a513099a302055a962bca2cec0f54b8b63175d8b"),
        ("2.0.5", "fa471a601dfea0f492e4f4fca035cd82155e65dc45c9b83bf4322dfab63755dd"),
        ("2.0.6", "5d209c0a931f215cee683b6445e2d77677e7e75e159f78def0db09d68fafcaa6"),
        ("2.0.7", "f7af805c321bfa1ce6714c51f254e0d5bb5e5834039bc17db7ebe3a4cec9492b"),
        ("2.0.8", "83fcdeb225499d6344c8f7f34684c2981270beacc32ede2e669e94f7fa544405"),
        ("2.0.9", "1eecaa09422db5be9e29d7fc65664e6c33bd06f9ced7838578ba40d58bdf3721"),
        ("2.0.10", "cb957888737fc0bbcd78e3df769addb41fd1ff8cf950dc9e7ad7793f1bf44455"),
        ("2.0.11", "2842d8f5e82a1f6aa437380934d5e1cd4fcf2003b06fed6940769c164a480a45"),
        ("2.0.12", "6881edbebdb17b39b4eaaa821b438bf6eddffb4468cf344f09f89def34a8b1df"),
    ),
    "colorama": (
        ("0.4.0", "a3d89af5db9e9806a779a50296b5fdb466e281147c2c235e8225ecc6dbf7bbf3"),
        ("0.4.1", "f8ac84de7840f5b9c4e3347b3c1eaa50f7e49c2b07596221daec5edaabbd7c48"),
        ("0.4.3", "7d73d2a99753107a36ac6b455ee49046802e59d9d076ef8e47b61499fa29afff"),
        ("0.4.4", "9f47eda37229f68eee03b24b9748937c7dc3868f906e8ba69fbcbdd3bc5dc3e2"),
        ("0.4.5", "854bf444933e37f5824ae7bfc1e98d5bce2ebe4160d46b5edf346a89358e99da"),
        ("0.4.6", "4f1d9991f5acc0ca119f9d443620b77f9d6b33703e51011c16baf57afb285fc6"),
    ),
    "distlib": (
        ("0.3.4", "6564fe0a8f51e734df6333d08b8b94d4ea8ee6b99b5ed50613f731fd4089f34b"),
        ("0.3.5", "b710088c59f06338ca514800ad795a132da19fda270e3ce4affc74abf955a26c"),
        ("0.3.6", "f35c4b692542ca110de7ef0bea44d73981caeb34ca0b9b6b2e6d7790dda8f80e"),
        ("0.3.7", "2e24928bc811348f0feb63014e97aaae3037f2cf48712d51ae61df7fd6075057"),
        ("0.3.8", "034db59a0b96f8ca18035f36290806a9a6e6bd9d1ff91e45a7f172eb17e51784"),
        ("0.3.9", "47f8c22fd27c27e25a65601af709b38e4f0a45ea4fc2e710f65755fa8caaaf87"),
    ),
    "exceptiongroup": (
        ("1.0.4", "542adf9dea4055530d6e1279602fa5cb11dab2395fa650b8674eaec35fc4a828"),
        ("1.1.0", "327cbda3da756e2de031a3107b81ab7b3770a602c4d16ca618298c526f4bec1e"),
        ("1.1.1", "232c37c63e4f682982c8b6459f33a8981039e5fb8756b2074364e5055c498c9e"),
        ("1.1.2", "e346e69d186172ca7cf029c8c1d16235aa0e04035e5750b4b95039e65204328f"),
        ("1.1.3", "343280667a4585d195ca1cf9cef84a4e178c4b6cf2274caef9859782b567d5e3"),
        ("1.2.0", "4bfd3996ac73b41e9b9628b04e079f193850720ea5945fc96a08633c66912f14"),
        ("1.2.1", "5258b9ed329c5bbdd31a309f53cbfb0b155341807f6ff7606a1e801a891b29ad"),
        ("1.2.2", "3111b9d131c238bec2f8f516e123e14ba243563fb135d3fe885990585aa7795b"),
    ),
    "filelock": (
        ("3.13.0", "a552f4fde758f4eab33191e9548f671970f8b06d436d31388c9aa1e5861a710f"),
        ("3.13.1", "57dbda9b35157b05fb3e58ee91448612eb674172fab98ee235ccb0b5bee19a1c"),
        ("3.13.3", "5ffa845303983e7a0b7ae17636509bc97997d58afeafa72fb141a17b152284cb"),
        ("3.13.4", "404e5e9253aa60ad457cae1be07c0f0ca90a63931200a47d9b6a6af84fd7b45f"),
        ("3.14.0", "43339835842f110ca7ae60f1e1c160714c5a6afd15a2873419ab185334975c0f"),
        ("3.15.0", "a44ed538e517cc4c9534da2a0bf8a4911cac9a78e30adfafc344c0df56a9f1ed"),
        ("3.15.1", "71b3102950e91dfc1bb4209b64be4dc8854f40e5f534428d8684f953ac847fac"),
        ("3.15.4", "6ca1fffae96225dab4c6eaf1c4f4f28cd2568d3ec2a44e15a08520504de468e7"),
        ("3.16.0", "f6ed4c963184f4c84dd5557ce8fece759a3724b37b80c6c4f20a2f63a4dc6609"),
        ("3.16.1", "2082e5703d51fbf98ea75855d9d5527e33d8ff23099bec374a134febee6946b0"),
    ),
    "flask": (
        ("2.2.0", "10dc2bae7a9b6ab59111d6dbece2e08fb0015d2e88d296c40323cc0c7aac2c2e"),
        ("2.2.1", "3c604c48c3d5b4c63e72134044c0b4fe90ff01ef65280b9fe2d38c8860d99fe5"),
        ("2.2.2", "b9c46cc36662a7949f34b52d8ec7bb59c0d74ba08ba6cb9ce9adc1d8676d9526"),
        ("2.2.3", "c0bec9477df1cb867e5a67c9e1ab758de9cb4a3e52dd70681f59fa40a62b3f2d"),
        ("2.2.4", "13f6329ddbfff11340939cd11919daf150a01358ded4b7e81c03c055dfecb559"),
        ("2.2.5", "58107ed83443e86067e41eff4631b058178191a355886f8e479e347fa1285fdf"),
        ("2.3.0", "99a4889167c86fe57c4036825ebc77dc5dc3241bf0d80ea80ca941587d0d6a52"),
        ("2.3.1", "8ba2a854608fdd603b67dccd4514a46450132227fb9df40127a8d0c1de8769ec"),
        ("2.3.2", "77fd4e1249d8c9923de34907236b747ced06e5467ecac1a7bb7115ae0e9670b0"),
        ("2.3.3", "f69fcd559dc907ed196ab9df0e48471709175e696d6e698dd4dbe940f96ce66b"),
    ),
    "httpx": (
        ("0.23.1", "0b9b1f0ee18b9978d637b0776bfd7f54e2ca278e063e3586d8f01cda89e042a8"),
        ("0.23.2", "106cded342a44e443060fab70ef327139248c61939e77d73964560c8d8b57069"),
        ("0.23.3", "a211fcce9b1254ea24f0cd6af9869b3d29aba40154e947d2a07bb499b3e310d6"),
        ("0.24.0", "447556b50c1921c351ea54b4fe79d91b724ed2b027462ab9a329465d147d5a4e"),
        ("0.24.1", "06781eb9ac53cde990577af654bd990a4949de37a28bdb4a230d434f3a30b9bd"),
        ("0.25.0", "181ea7f8ba3a82578be86ef4171554dd45fec26a02556a744db029a0a27b7100"),
        ("0.25.1", "fec7d6cc5c27c578a391f7e87b9aa7d3d8fbcd034f6399f9f79b45bcc12a866a"),
        ("0.25.2", "a05d3d052d9b2dfce0e3896636467f8a5342fb2b902c819428e1ac65413ca118"),
        ("0.26.0", "8915f5a3627c4d47b73e8202457cb28f1266982d1159bd5779d86a80c0eab1cd"),
    ),
    "humanize": (
        ("4.7.0", "df7c429c2d27372b249d3f26eb53b07b166b661326e0325793e0a988082e3889"),
        ("4.8.0", "8bc9e2bb9315e61ec06bf690151ae35aeb65651ab091266941edf97c90836404"),
        ("4.9.0", "ce284a76d5b1377fd8836733b983bfb0b76f1aa1c090de2566fcf008d7f6ab16"),
        ("4.10.0", "39e7ccb96923e732b5c2e27aeaa3b10a8dfeeba3eb965ba7b74a3eb0e30040a6"),
        ("4.11.0", "b53caaec8532bcb2fff70c8826f904c35943f8cecaca29d272d9df38092736c0"),
        ("4.12.0", "106a7436a2d545d742c147c469716b3a08424aa143a82103630147c489a89f48"),
        ("4.12.1", "86014ca5c52675dffa1d404491952f1f5bf03b07c175a51891a343daebf01fea"),
    ),
    "idna": (
        ("3.6", "c05567e9c24a6b9faaa835c4821bad0590fbb9d5779e7caa6e1cc4978e7eb24f"),
        ("3.7", "82fee1fc78add43492d3a1898bfa6d8a904cc97d8427f683ed8e798d07761aa0"),
        ("3.8", "050b4e5baadcd44d760cedbd2b8e639f2ff89bbc7a5730fcc662954303377aac"),
        ("3.9", "69297d5da0cc9281c77efffb4e730254dd45943f45bbfb461de5991713989b1e"),
        ("3.10", "946d195a0d259cbba61165e88e65941f16e9b36ea6ddb97f00452bae8b1287d3"),
        ("3.11", "771a87f49d9defaf64091e6e6fe9c18d4833f140bd19464795bc32d966ca37ea"),
    ),
    "isort": (
        ("5.11.0", "1b8631908ecc1b7108801801e510c4bf908962b77bd44882a3873566542f7255"),
        ("5.11.1", "bf02c95f1fe615ebbe13a619cfed1619ddfe8941274c9e3de3143adca406cb02"),
        ("5.11.2", "e486966fba83f25b8045f8dd7455b0a0d1e4de481e1d7ce4669902d9fb85e622"),
        ("5.11.3", "83155ffa936239d986b0f190347a3f2285f42a9b9e1725c89d865b27dd0627e5"),
        ("5.11.4", "c033fd0edb91000a7f09527fe5c75321878f98322a77ddcc81adbd83724afb7b"),
        ("5.12.0", "f84c2818376e66cf843d497486ea8fed8700b340f308f076c6fb1229dff318b6"),
        ("5.13.0", "15e0e937819b350bc256a7ae13bb25f4fe4f8871a0bc335b20c3627dba33f458"),
        ("5.13.1", "56a51732c25f94ca96f6721be206dd96a95f42950502eb26c1015d333bc6edb7"),
        ("5.13.2", "8ca5e72a8d85860d5a3fa69b8745237f2939afe12dbf656afbcb47fe72d947a6"),
    ),
    "itsdangerous": (
        ("2.0.0", "e2cb4ae918f07ab2a2f9a91dec2695bd1f25a19d31861a70015ad537ccb5e807"),
        ("2.0.1", "5174094b9637652bdb841a3029700391451bd092ba3db90600dea710ba28e97c"),
        ("2.1.0", "29285842166554469a56d427addc0843914172343784cb909695fdbe90a3e129"),
        ("2.1.1", "935642cd4b987cdbee7210080004033af76306757ff8b4c0a506a4b6e06f02cf"),
        ("2.1.2", "2c2349112351b88699d8d4b6b075022c0808887cb7ad10069318a8b0bc88db44"),
        ("2.2.0", "c6242fc49e35958c8b15141343aa660db5fc54d4f13a1db01a3f5891b98700ef"),
    ),
    "jinja2": (
        ("3.0.0", "2f2de5285cf37f33d33ecd4a9080b75c87cd0c1994d5a9c6df17131ea1f049c6"),
        ("3.0.1", "1f06f2da51e7b56b8f238affdd6b4e2c61e39598a378cc49345bc1bd42a978a4"),
        ("3.0.2", "8569982d3f0889eed11dd620c706d39b60c36d6d25843961f33f77fb6bc6b20c"),
        ("3.0.3", "077ce6014f7b40d03b47d1f1ca4b0fc8328a692bd284016f806ed0eaca390ad8"),
        ("3.1.0", "da424924c069a4013730d8dd010cbecac7e7bb752be388db3741688bffb48dc6"),
        ("3.1.1", "539835f51a74a69f41b848a9645dbdc35b4f20a3b601e2d9a7e22947b15ff119"),
        ("3.1.2", "6088930bfe239f0e6710546ab9c19c9ef35e29792895fed6e6e31a023a182a61"),
        ("3.1.3", "7d6d50dd97d52cbc355597bd845fabfbac3f551e1f99619e39a35ce8c370b5fa"),
        ("3.1.4", "bc5dd2abb727a5319567b7a813e6a2e7318c39f4f487cfe6c89c6f9c7d25197d"),
    ),
    "mako": (
        ("1.2.0", "23aab11fdbbb0f1051b93793a58323ff937e98e34aece1c4219675122e57e4ba"),
        ("1.2.1", "df3921c3081b013c8a2d5ff03c18375651684921ae83fd12e64800b7da923257"),
        ("1.2.2", "8efcb8004681b5f71d09c983ad5a9e6f5c40601a6ec469148753292abc0da534"),
        ("1.2.3", "c413a086e38cd885088d5e165305ee8eed04e8b3f8f62df343480da0a385735f"),
        ("1.2.4", "c97c79c018b9165ac9922ae4f32da095ffd3c4e6872b45eded42926deea46818"),
        ("1.3.0", "57d4e997349f1a92035aa25c17ace371a4213f2ca42f99bee9a602500cfd54d9"),
        ("1.3.2", "32a99d70754dfce237019d17ffe4a282d2d3351b9c476e90d8a60e63f133b80c"),
        ("1.3.3", "5324b88089a8978bf76d1629774fcc2f1c07b82acdf00f4c5dd8ceadfffc4b40"),
    ),
    "markdown": (
        ("3.4.4", "a4c1b65c0957b4bd9e7d86ddc7b3c9868fb9670660f6f99f6d1bca8954d5a941"),
        ("3.5", "4afb124395ce5fc34e6d9886dab977fd9ae987fc6e85689f08278cf0c69d4bf3"),
        ("3.5.1", "5874b47d4ee3f0b14d764324d2c94c03ea66bee56f2d929da9f2508d65e722dc"),
        ("3.5.2", "d43323865d89fc0cb9b20c75fc8ad313af307cc087e84b657d9eec768eddeadd"),
        ("3.6", "48f276f4d8cfb8ce6527c8f79e2ee29708508bf4d40aa410fbc3b4ee832c850f"),
        ("3.7", "7eb6df5690b81a1d7942992c97fad2938e956e79df20cbc6186e9c3a77b1c803"),
        ("3.8", "794a929b79c5af141ef5ab0f2f642d0f7b1872981250230e72682346f7cc90dc"),
    ),
    "more-itertools": (
        ("10.0.0", "928d514ffd22b5b0a8fce326d57f423a55d2ff783b093bab217eda71e732330f"),
        ("10.1.0", "64e0735fcfdc6f3464ea133afe8ea4483b1c5fe3a3d69852e6503b43a0b222e6"),
        ("10.2.0", "686b06abe565edfab151cb8fd385a05651e1fdf8f0a14191e4439283421f8684"),
        ("10.3.0", "ea6a02e24a9161e51faad17a8782b92a0df82c12c1c8886fec7f0c3fa1a1b320"),
        ("10.4.0", "0f7d9f83a0a8dcfa8a2694a770590d98a67ea943e3d9f5298309a484758c4e27"),
        ("10.5.0", "037b0d3203ce90cca8ab1defbbdac29d5f993fc20131f3664dc8d6acfa872aef"),
    ),
    "packaging": (
        ("21.3", "ef103e05f519cdc783ae24ea4e2e0f508a9c99b2d4969652eed6a2e1ea5bd522"),
        ("22.0", "957e2148ba0e1a3b282772e791ef1d8083648bc131c8ab0c1feba110ce1146c3"),
        ("23.0", "714ac14496c3e68c99c29b00845f7a2b85f3bb6f1078fd9f72fd20f0570002b2"),
        ("23.1", "994793af429502c4ea2ebf6bf664629d07c1a9fe974af92966e4b8d2df7edc61"),
        ("23.2", "8c491190033a9af7e1d931d0b5dacc2ef47509b34dd0de67ed209b5203fc88c7"),
        ("24.0", "2ddfb553fdf02fb784c234c7ba6ccc288296ceabec964ad2eae3777778130bc5"),
        ("24.1", "5b8f2217dbdbd2f7f384c41c628544e6d52f2d0f53c6d0c3ea61aa5d1d7ff124"),
        ("24.2", "09abb1bccd265c01f4a3aa3f7a7db064b36514d2cba19a2f694fe6150451a759"),
    ),
    "parso": (
        ("0.8.0", "dc6c57ae210fc89b1de8fb0e7dc273fd6e40ebbe23c79b6e3c2b7dcbeb38c513"),
        ("0.8.1", "15b00182f472319383252c18d5913b69269590616c947747bc50bf4ac768f410"),
        ("0.8.2", "a8c4922db71e4fdb90e0d0bc6e50f9b273d3397925e5e60a717e719201778d22"),
        ("0.8.3", "c001d4636cd3aecdaf33cbb40aebb59b094be2a74c556778ef5576c175e19e75"),
        ("0.8.4", "a418670a20291dacd2dddc80c377c5c3791378ee1e8d12bffc35420643d43f18"),
    ),
    "pathspec": (
        ("0.10.1", "46846318467efc4556ccfd27816e004270a9eeeeb4d062ce5e6fc7a87c573f93"),
        ("0.10.2", "88c2606f2c1e818b978540f73ecc908e13999c6c3a383daf3705652ae79807a5"),
        ("0.10.3", "3c95343af8b756205e2aba76e843ba9520a24dd84f68c22b9f93251507509dd6"),
        ("0.11.0", "3a66eb970cbac598f9e5ccb5b2cf58930cd8e3ed86d393d541eaf2d8b1705229"),
        ("0.11.1", "d8af70af76652554bd134c22b3e8a1cc46ed7d91edcdd721ef1a0c51a84a5293"),
        ("0.11.2", "1d6ed233af05e679efb96b1851550ea95bbb64b7c490b0f5aa52996c11e92a20"),
        ("0.12.0", "f1f8a7eab698c357945c85ed79715e014612b8584faebe209dca4558e2b09513"),
        ("0.12.1", "a0d503e138a4c123b27490a4f7beda6a01c6f288df0e4a8b79c7eb0dc7b4cc08"),
    ),
    "platformdirs": (
        ("4.2.0", "0614df2a2f37e1a662acbd8e2b25b92ccf8632929bc6d43467e17fe89c75e068"),
        ("4.2.1", "17d5a1161b3fd67b390023cb2d3b026bbd40abde6fdb052dfbd3a29c3ba22ee1"),
        ("4.2.2", "2d7a1657e36a80ea911db832a8a6ece5ee53d8de21edd5cc5879af6530b1bfee"),
        ("4.3.0", "9e61c76f0f3671ea805011196063918d760894ee7f280dd083e2626fbaac3bc8"),
        ("4.3.2", "eb1c8582560b34ed4ba105009a4badf7f6f85768b30126f351328507b2beb617"),
        ("4.3.3", "50a5450e2e84f44539718293cbb1da0a0885c9d14adf21b77bae4e66fc99d9b5"),
        ("4.3.6", "73e575e1408ab8103900836b97580d5307456908a03e92031bab39e4554cc3fb"),
    ),
    "pluggy": (
        ("1.0.0", "74134bbf457f031a36d68416e1509f34bd5ccc019f0bcc952c7b909d06b37bd3"),
        ("1.2.0", "c2fd55a7d7a3863cba1a013e4e2414658b1d07b6bc57b3919e0c63c9abb99849"),
        ("1.3.0", "d89c696a773f8bd377d18e5ecda92b7a3793cbe66c87060a6fb58c7b6e1061f7"),
        ("1.4.0", "7db9f7b503d67d1c5b95f59773ebb58a8c1c288129a88665838012cfb07b8981"),
        ("1.5.0", "44e1ad92c8ca002de6377e165f3e0f1be63266ab4d554740532335b9d75ea669"),
        ("1.6.0", "e920276dd6813095e9377c0bc5566d94c932c33b27a3e3945d8389c374dd4746"),
    ),
    "pyflakes": (
        ("2.4.0", "3bb3a3f256f4b7968c9c788781e4ff07dce46bdf12339dcda61053375426ee2e"),
        ("2.5.0", "4579f67d887f804e67edb544428f264b7b24f435b263c4614f384135cea553d2"),
        ("3.0.0", "e38cbaa285564388a9622d7e440445d40c508d8fbf96e0c0f3ef28e47d8ba8a2"),
        ("3.0.1", "ec55bf7fe21fff7f1ad2f7da62363d749e2a470500eab1b555334b67aa1ef8cf"),
        ("3.1.0", "4132f6d49cb4dae6819e5379898f2b8cce3c5f23994194c24b77d5da2e36f774"),
        ("3.2.0", "84b5be138a2dfbb40689ca07e2152deb896a65c3a3e24c251c5c62489568074a"),
    ),
    "pyparsing": (
        ("3.0.9", "5026bae9a10eeaefb61dab2f09052b9f4307d44aee4eda64b309723d8d206bbc"),
        ("3.1.0", "d554a96d1a7d3ddaf7183104485bc19fd80543ad6ac5bdb6426719d766fb06c1"),
        ("3.1.1", "32c7c0b711493c72ff18a981d24f28aaf9c1fb7ed5e9667c9e84e3db623bdbfb"),
        ("3.1.2", "f9db75911801ed778fe61bb643079ff86601aca99fcae6345aa67292038fb742"),
        ("3.1.3", "1e80fdf93e6c1aeaf4702523f1d48f66d52fa6459096a8f812591157270a5896"),
        ("3.1.4", "a6a7ee4235a3f944aa1fa2249307708f893fe5717dc603503c6c7969c070fb7c"),
        ("3.2.0", "93d9577b88da0bbea8cc8334ee8b918ed014968fd2ec383e868fb8afb1ccef84"),
    ),
    "python-dateutil": (
        ("2.7.0", "07009062406cffd554a9b4135cd2ff167c9bf6b7aac61fe946c93e69fad1bbd8"),
        ("2.7.1", "6c0e72580272b561d8594362ab0e6b5b2191c703982150fc06ed45f7fae725be"),
        ("2.7.2", "3220490fb9741e2342e1cf29a503394fdac874bc39568288717ee67047ff29df"),
        ("2.7.3", "1adb80e7a782c12e52ef9a8182bebeb73f1d7e24e374397af06fb4956c8dc5c0"),
        ("2.7.4", "f7cde3aecf8a797553d6ec49b65f0fbcffe7ffb971ccac452d181c28fd279936"),
        ("2.7.5", "063df5763652e21de43de7d9e00ccf239f953a832941e37be541614732cdfc93"),
        ("2.8.0", "7e6584c74aeed623791615e26efd690f29817a27c73085b78e4bad02493df2fb"),
        ("2.8.1", "75bb3f31ea686f1197762692a9ee6a7550b59fc6ca3a1f4b5d7e32fb98e2da2a"),
        ("2.8.2", "961d03dc3453ebbc59dbdea9e4e11c5651520a876d0f4db161e8674aae935da9"),
    ),
    "requests": (
        ("2.28.0", "bc7861137fbce630f17b03d3ad02ad0bf978c844f3536d0edda6499dafce2b6f"),
        ("2.28.1", "8fefa2a1a1365bf5520aac41836fbee479da67864514bdb821f31ce07ce65349"),
        ("2.28.2", "64299f4909223da747622c030b781c0d7811e359c37124b4bd368fb8c6518baa"),
        ("2.29.0", "e8f3c9be120d3333921d213eef078af392fba3933ab7ed2d1cba3b56f2568c3b"),
        ("2.30.0", "10e94cc4f3121ee6da529d358cdaeaff2f1c409cd377dbc72b825852f2f7e294"),
        ("2.31.0", "58cd2187c01e70e6e26505bca751777aa9f2ee0b7f4300988b709f44e013003f"),
        ("2.32.2", "fc06670dd0ed212426dfeb94fc1b983d917c4f9847c863f313c9dfaaffb7c23c"),
        ("2.32.3", "70761cfe03c773ceb22aa2f671b4757976145175cdfca038c02654d061d6dcc6"),
    ),
    "six": (
        ("1.12.0", "3350809f0555b11f552448330d0b52d5f24c91a322ea4a15ef22629740f3761c"),
        ("1.13.0", "1f1b7d42e254082a9db6279deae68afb421ceba6158efa6131de7b3003ee93fd"),
        ("1.14.0", "8f3cd2e254d8f793e7f3d6d9df77b92252b52637291d0f0da013c76ea2724b6c"),
        ("1.15.0", "8b74bedcbbbaca38ff6d7491d76f2b06b3592611af620f8426e82dddb04a5ced"),
        ("1.16.0", "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"),
        ("1.17.0", "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"),
    ),
    "tomli": (
        ("1.1.0", "f4a182048010e89cbec0ae4686b21f550a7f2903f665e34a6de58ec15424f919"),
        ("1.2.0", "056f0376bf5a6b182c513f9582c1e5b0487265eb6c48842b69aa9ca1cd5f640a"),
        ("1.2.1", "8dd0e9524d6f386271a36b41dbf6c57d8e32fd96fd22b6584679dc569d20899f"),
        ("1.2.2", "f04066f68f5554911363063a30b108d2b5a5b1a010aa8b6132af78489fe3aade"),
        ("1.2.3", "e3069e4be3ead9668e21cb9b074cd948f7b3113fd9c8bba083f48247aab8b11c"),
        ("2.0.0", "b5bde28da1fed24b9bd1d4d2b8cba62300bfb4ec9a6187a957e8ddb9434c5224"),
        ("2.0.1", "939de3e7a6161af0c887ef91b7d41a53e7c5a1ca976325f429cb46ea9bc30ecc"),
    ),
    "tomlkit": (
        ("0.11.0", "0f4050db66fd445b885778900ce4dd9aea8c90c4721141fde0d6ade893820ef1"),
        ("0.11.1", "1c5bebdf19d5051e2e1de6cf70adfc5948d47221f097fcff7a3ffc91e953eaf5"),
        ("0.11.2", "69e0675671a2eed1c08a53f342c955c4ead5d373a10f756219bf39f3d4f0018a"),
        ("0.11.3", "800628e7705ff7c7cc4395c29836c7073e55b9ec820e1fc696080f9c5591a789"),
        ("0.11.4", "25d4e2e446c453be6360c67ddfb88838cfc42026322770ba13d1fbd403a93a5c"),
        ("0.11.5", "f2ef9da9cef846ee027947dc99a45d6b68a63b0ebc21944649505bf2e8bc5fe7"),
        ("0.11.6", "07de26b0d8cfc18f871aec595fda24d95b08fef89d147caa861939f37230bf4b"),
        ("0.11.7", "5325463a7da2ef0c6bbfefb62a3dc883aebe679984709aee32a317907d0a8d3c"),
        ("0.11.8", "8c726c4c202bdb148667835f68d68780b9a003a9ec34167b6c673b38eff2a171"),
    ),
    "toolz": (
        ("0.11.0", "39e5ec7e9cbdb63a6aa2ad8a257a4ba6572424ce776fa543a3a151d8479dce5f"),
        ("0.11.1", "1bc473acbf1a1db4e72a1ce587be347450e8f08324908b8a266b486f408f04d5"),
        ("0.11.2", "a5700ce83414c64514d82d60bcda8aabfde092d1c1a8663f9200c07fdcc6da8f"),
        ("0.12.0", "2059bd4148deb1884bb0eb770a3cde70e7f954cfbbdc2285f1f2de01fd21eb6f"),
        ("0.12.1", "d22731364c07d72eea0a0ad45bafb2c2937ab6fd38a3507bf55eae8744aa7d85"),
        ("1.0.0", "292c8f1c4e7516bf9086f8850935c799a874039c8bcf959d47b600e4c44a6236"),
    ),
    "tqdm": (
        ("4.64.0", "74a2cdefe14d11442cedf3ba4e21a3b84ff9a2dbdc6cfae2c34addb2a14a5ea6"),
        ("4.64.1", "6fee160d6ffcd1b1c68c65f14c829c22832bc401726335ce92c52d395944a6a1"),
        ("4.65.0", "c4f53a17fe37e132815abceec022631be8ffe1b9381c2e6e30aa70edc99e9671"),
        ("4.66.0", "39d459c7140b7890174e69d4d68d6291bc774a55b4bc5d93c0b760798ac5a03e"),
        ("4.66.1", "d302b3c5b53d47bce91fea46679d9c3c6508cf6332229aa1e7d8653723793386"),
        ("4.66.2", "1ee4f8a893eb9bef51c6e35730cebf234d5d0b6bd112b0271e10ed7c24a02bd9"),
        ("4.66.3", "4f41d54107ff9a223dca80b53efe4fb654c67efaba7f47bada3ee9d50e05bd53"),
        ("4.66.4", "b75ca56b413b030bc3f00af51fd2c1a1a5eac6a0c1cca83cbb37a5c52abce644"),
        ("4.66.5", "90279a3770753eafc9194a0364852159802111925aa30eb3f9d85b0e805ac7cd"),
    ),
    "urllib3": (
        ("2.0.3", "48e7fafa40319d358848e1bc6809b208340fafe2096f1725d05d67443d0483d1"),
        ("2.0.4", "de7df1803967d2c2a98e4b11bb7d6bd9210474c46e8a0401514e3a42a75ebde4"),
        ("2.0.5", "ef16afa8ba34a1f989db38e1dbbe0c302e4289a47856990d0682e374563ce35e"),
        ("2.0.6", "7a7c7003b000adf9e7ca2a377c9688bbc54ed41b985789ed576570342a375cd2"),
        ("2.0.7", "fdb6d215c776278489906c2f8916e6e7d4f5a9b602ccbcfdf7f016fc8da0596e"),
        ("2.1.0", "55901e917a5896a349ff771be919f8bd99aff50b79fe58fec595eb37bbc56bb3"),
        ("2.2.0", "ce3711610ddce217e6d113a2732fafad960a03fd0318c91faa79481e35c11224"),
        ("2.2.1", "450b20ec296a467077128bff42b73080516e71b56ff59a60a02bef2232c4fa9d"),
        ("2.2.2", "a448b2f64d686155468037e1ace9f2d2199776e17f0a46610480d311f73e3472"),
    ),
    "werkzeug": (
        ("2.3.0", "340335057f72974d9281dbaf52c8090a9f9a59ba304ae814bf0656e6559c0020"),
        ("2.3.1", "69a4b8fcbb30a4c3fa81a5cebd961541273e4d222a4c08593b0b18312e14f64a"),
        ("2.3.2", "b7b8bc1609f35ae8e45d48a9b58d7a4eb1e41eec148d37e977e5df6ebf3398b2"),
        ("2.3.3", "4866679a0722de00796a74086238bb3b98d90f423f05de039abb09315487254a"),
        ("2.3.4", "48e5e61472fee0ddee27ebad085614ebedb7af41e88f687aaf881afb723a162f"),
        ("2.3.5", "26c6a6a63a8a8d10a8d4e13e7f10821772ff5f138909262e89e946717c72b857"),
        ("2.3.6", "935539fa1413afbb9195b24880778422ed620c0fc09670945185cce4d91a8890"),
        ("2.3.7", "effc12dba7f3bd72e605ce49807bbe692bd729c3bb122a3b91747a6ae77df528"),
        ("2.3.8", "bba1f19f8ec89d4d607a3bd62f1904bd2e609472d93cd85e9d4e178f472c3748"),
    ),
}

# Names the train set may not hold (normalised, ``normalise``), besides the evaluation set's own (``RELEASES``):
# the repositories the shared next-edit set comes from (../shared/benchmarks/next-edit/README.md: pygls, click,
# attrs, rich, nanoGPT, gpt-fast, flash-linear-attention, Liger-Kernel, LLaDA, Fast-dLLM, with their PyPI names)
# and the packages of the real-code set (benchmarks/real_code_set.py PACKAGES). Training on them would leak
# the code those benchmarks score.
HELD_OUT = frozenset({
    "pygls", "click", "attrs", "rich", "nanogpt", "gpt-fast", "flash-linear-attention", "fla", "fla-core",
    "liger-kernel", "llada", "fast-dllm",
    "marshmallow", "parsimonious", "schedule", "glom", "structlog", "environs", "python-slugify",
    "dataclasses-json",
})


def normalise(name: str) -> str:
    """A package name as PEP 503 compares them (lower case, runs of ``-_.`` as one ``-``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def check_train(train: Iterable[str], evaluation: Iterable[str]) -> None:
    """Stop (SystemExit) when a training package is an evaluation package or in ``HELD_OUT``."""
    banned = HELD_OUT | {normalise(n) for n in evaluation}
    bad = sorted(n for n in train if normalise(n) in banned)
    if bad:
        raise SystemExit(f"training packages held out for evaluation: {', '.join(bad)}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(name: str, version: str, digest: str, dest: Path) -> Path:
    """The release's wheel in ``dest`` (pip download, no dependencies), its sha256 checked."""
    dest.mkdir(parents=True, exist_ok=True)

    def wheels() -> list[Path]:  # by the file name's distribution (normalised: Jinja2, python_dateutil) and version
        return sorted(p for p in dest.glob("*.whl")
                      if normalise(p.name.split("-")[0]) == normalise(name) and p.name.split("-")[1] == version)

    found = wheels()
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "--dest", str(dest), f"{name}=={version}"], check=True)
        found = wheels()
    if len(found) != 1:
        raise SystemExit(f"expected one wheel of {name}=={version} in {dest}, found {found}")
    got = sha256(found[0])
    if got != digest:
        raise SystemExit(f"{found[0].name}: sha256 {got}, pinned {digest}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (cases.jsonl.gz, manifest.json, downloads/)")
    ap.add_argument("--set", choices=("eval", "train"), default="eval",
                    help="eval: the held-out set (RELEASES); train: the training set (TRAIN_RELEASES)")
    a = ap.parse_args(argv)
    train = a.set == "train"
    if train:
        check_train(TRAIN_RELEASES, RELEASES)
    table = TRAIN_RELEASES if train else RELEASES
    out = Path(a.out)
    downloads: list[dict[str, object]] = []
    cases: list[dict[str, object]] = []
    pairs: list[dict[str, object]] = []
    for name, releases in table.items():
        trees = []
        for version, digest in releases:
            wheel = download(name, version, digest, out / "downloads")
            downloads.append({"package": name, "version": version, "file": wheel.name,
                              "bytes": wheel.stat().st_size, "sha256": digest})
            trees.append((version, release_edits.wheel_sources(wheel)))
        for old, new in zip(trees, trees[1:], strict=False):
            got = release_edits.pair_cases(name, old, new)
            changed = sum(1 for p in set(old[1]) & set(new[1]) if old[1][p] != new[1][p])
            pairs.append({"package": name, "old": old[0], "new": new[0], "changed_files": changed,
                          "cases": len(got)})
            cases += got
    chosen = sorted(release_edits.dedupe(cases), key=lambda c: str(c["id"])) if train else release_edits.select(cases)
    path = release_edits.write_cases(chosen, out)
    per_package = {n: sum(c["package"] == n for c in chosen) for n in table}
    rule = ("MAX_FILE_BYTES", "MAX_HUNK_ROWS", "MAX_HISTORY", "MAX_GAP", "FAR", "PER_FILE", "PER_PACKAGE", "SEED")
    manifest = {
        **({"set": "train"} if train else {}),  # the evaluation manifest stays as it was (no "set")
        "python": platform.python_version(), "pip": metadata.version("pip"),
        "rule": {k: getattr(release_edits, k) for k in rule if not (train and k == "PER_PACKAGE")},
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
