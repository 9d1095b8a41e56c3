"""What the subcommands share: the usage error, ``--dtype``, and the sampler flags, made from the one definition
of each sampler setting (``sampler_settings.SETTINGS``: flag, type, range and help)."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable
from typing import Any


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit code 2."""


def is_loopback(host: str) -> bool:
    """Whether a listening address is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def dtype_arg(text: str) -> str:
    """``--dtype NAME``: a serving dtype's name or ``auto``, checked by ``dtypes.check_dtype_name`` (a usage
    error)."""
    from edit_engine.model.dtypes import check_dtype_name

    try:
        return check_dtype_name(text, "--dtype")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_dtype_arg(p: argparse.ArgumentParser) -> None:
    """``--dtype``, shared by the commands that load a model to serve it (infill, eval, bench, lsp)."""
    p.add_argument("--dtype", type=dtype_arg, metavar="NAME",
                   help="what the model computes in: auto, float32, bfloat16 or int8 (auto: bf16 on a GPU and on CPUs "
                   "with avx512_bf16 or AMX, float32 elsewhere; bf16 is slower without them; int8: CPUs with VNNI "
                   "or AMX only, declined with a warning elsewhere; bf16 and int8 can change a fill; default: "
                   "EDIT_ENGINE_DTYPE, else auto for edit-engine models, the open model's own otherwise)")


def _setting_type(name: str) -> Callable[[str], Any]:
    from edit_engine.decoding.sampler_settings import SETTINGS

    def parse(text: str) -> Any:
        try:
            return SETTINGS[name].parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name  # argparse names the type in its messages
    return parse


# The sampler settings a user tunes from the command line (the rest are the planner's or a benchmark's).
SAMPLER_FLAGS = ("threshold", "min_commit", "spread", "floor_ramp", "pad_threshold", "novel_penalty")


def add_sampler_args(p: argparse.ArgumentParser, names: tuple[str, ...] = SAMPLER_FLAGS) -> None:
    """A flag per sampler setting in ``names`` (``--min-commit N``...), None unless given so that the model's
    ``sampler.json`` holds; ``--no-spread`` beside ``--spread``."""
    from edit_engine.decoding.sampler_settings import SETTINGS

    for name in names:
        s = SETTINGS[name]
        p.add_argument(s.flag, type=_setting_type(name), default=None, metavar=s.metavar,
                       help=f"{s.help} ({s.want()}; default: the model's sampler.json)")
        if name == "spread":
            p.add_argument("--no-spread", dest="spread", action="store_const", const=0, help="the plain floor")


def sampler_overrides(a: argparse.Namespace, names: tuple[str, ...] = SAMPLER_FLAGS) -> dict[str, Any]:
    """The sampler flags that were given, as ``Engine`` overrides."""
    return {n: getattr(a, n) for n in names if getattr(a, n, None) is not None}
