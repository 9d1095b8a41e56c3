"""The command line: ``edit-engine`` (``main``) and its subcommands ``infill`` and ``bench``; the flags shared with
the language server's and the server's subcommands (``args``) and the plots the benchmarks draw.
"""
