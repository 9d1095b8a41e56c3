"""``edit-engine lsp``: the language server on stdio (or ``--tcp PORT``).

Only argparse code at import time; pygls and torch are imported inside the handler. stdout is the LSP channel,
so logs go to ``--log-file`` (INFO and above unless ``--log-level`` says otherwise) or to stderr (WARNING and
above: editors show all of stderr as errors in their LSP log), and to ``window/logMessage``.
"""

from __future__ import annotations

import argparse
import logging

from edit_engine.cli.args import UserError, add_dtype_arg, is_loopback


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("lsp", help="run the language server (stdio by default)")
    p.set_defaults(handler=_lsp)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--stdio", action="store_true",
                       help="talk over stdin/stdout (the default; clients such as vscode-languageclient add it)")
    where.add_argument("--tcp", type=int, metavar="PORT", help="listen on this TCP port instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="address for --tcp (default 127.0.0.1); the language "
                   "server has no authentication, so an address beyond this machine needs --allow-remote")
    p.add_argument("--allow-remote", action="store_true",
                   help="with --tcp: listen on a non-loopback --host (anyone who reaches it can use the model and "
                   "read the documents it is sent)")
    p.add_argument("--model", help="checkpoint directory (default: the packaged model; a client's "
                                   "initializationOptions.modelPath overrides it)")
    p.add_argument("--log-file", help="write the server log (and editEngine/accepted telemetry) here")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="default: INFO into --log-file, WARNING on stderr (editors show stderr as errors)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    add_dtype_arg(p)


def configure_logging(log_file: str | None, level: str | None) -> None:
    """Logs to a file, or to stderr; never to stdout. ``level`` None: INFO into a file, WARNING on stderr."""
    handler: logging.Handler = logging.FileHandler(log_file, encoding="utf-8") if log_file else \
        logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or ("INFO" if log_file else "WARNING"))
    logging.getLogger("pygls").setLevel(logging.WARNING)  # pygls logs every message body at INFO


def _lsp(a: argparse.Namespace) -> int:
    if a.tcp and not is_loopback(a.host) and not a.allow_remote:
        raise UserError(f"refusing to listen on {a.host!r}: the language server has no authentication, so anyone "
                        "who can reach it could use it. Bind 127.0.0.1, tunnel over SSH, or pass --allow-remote.")
    configure_logging(a.log_file, a.log_level)
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    if a.dtype:  # the process default that Engine.load reads, for every model this server loads
        import os

        from edit_engine.model.checkpoint import DTYPE_ENV

        os.environ[DTYPE_ENV] = a.dtype
    from edit_engine.lsp.server import create_server
    from edit_engine.lsp.settings import parse

    settings, warnings = parse({"modelPath": a.model} if a.model else {})
    for w in warnings:
        logging.getLogger("lsp").warning("%s", w)
    server = create_server(settings)
    # The exit code: 0 after shutdown + exit (or when the client closes the stream), 1 for exit without shutdown.
    return server.start_tcp(a.host, a.tcp) if a.tcp else server.start_io()

