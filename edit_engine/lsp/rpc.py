"""The language server's JSON-RPC layer: pygls' ``LanguageServerProtocol``, made strict where an editor waits for an
answer and quiet where nothing is wrong.

``receive(body)`` takes one message body from ``lsp.transport`` and:

- answers a body that is not JSON with -32700 and one that is not a JSON-RPC message with -32600 (id ``null`` when
  the message has no usable id);
- answers requests before ``initialize`` with -32002 (ServerNotInitialized) and drops notifications then, except
  ``exit``; answers requests after ``shutdown`` with -32600;
- answers a request whose params do not parse with -32602 (pygls would log and drop it, and the client would wait
  forever); keeps the params of our own methods as plain JSON;
- records the exit code of ``exit``: 0 after ``shutdown``, else 1 (``transport`` ends the process with it).

Expected answers (-32800 cancelled, -32801 content modified, -32001 over a limit) are logged at debug or info
level without a traceback, as are ``$/cancelRequest`` for requests already answered. pygls' own copy of the open
documents is not kept: the handlers keep theirs (``lsp.documents``), with a line index that edits update.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Iterator
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
)
from pygls.protocol.language_server import lsp_method

from edit_engine import protocol

log = logging.getLogger("lsp")

STATUS = "editEngine/status"  # request: counts of open documents and work in flight (tests, health checks)
OWN_REQUESTS = (protocol.INFILL, protocol.NEXT_EDIT, STATUS)  # our methods: params stay plain JSON
OWN_NOTIFICATIONS = (protocol.ACCEPTED,)

SERVER_NOT_INITIALIZED = -32002
# Answers that are part of normal editing: logged without a traceback, at this level.
EXPECTED = {protocol.REQUEST_CANCELLED: logging.DEBUG, protocol.CONTENT_MODIFIED: logging.DEBUG,
            protocol.SERVER_OVERLOADED: logging.INFO}


def _valid_id(v: Any) -> bool:
    return isinstance(v, str) or isinstance(v, int) and not isinstance(v, bool)


class Protocol(LanguageServerProtocol):
    """See the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initialize_received = False
        self.exit_code: int | None = None  # set by ``exit``

    # ------------------------------------------------------------------ receiving
    def receive(self, body: bytes) -> None:
        """Handle one message body (bytes between two frames)."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as e:
            log.warning("a message that is not JSON was answered with a parse error (%s)", e)
            self.send_error(None, protocol.PARSE_ERROR, "Parse error: the message is not JSON")
            return
        message = self._message(data)
        if message is None:
            return
        try:
            self.handle_message(message)
        except Exception:  # pygls answers handler errors itself; anything here is a bug in this layer
            log.exception("could not handle %s", getattr(message, "method", "a response"))
            if isinstance(data.get("id"), str | int) and "method" in data:
                self.send_error(data["id"], protocol.INTERNAL_ERROR, "internal error")

    def _message(self, data: Any) -> Any:
        """The structured message, or None when ``data`` was answered (or dropped) here."""
        if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
            return self._invalid(data, "not a JSON-RPC 2.0 message")
        has_id, method = "id" in data, data.get("method")
        if has_id and not _valid_id(data["id"]):
            return self._invalid(data, "the id must be a string or an integer")
        if "method" in data and not isinstance(method, str):
            return self._invalid(data, "the method must be a string")
        if method is None:
            if not has_id:
                return self._invalid(data, "neither a request, a notification nor a response")
        elif method in OWN_REQUESTS or method in OWN_NOTIFICATIONS:
            if has_id != (method in OWN_REQUESTS):
                return self._wrong_kind(data, method)
            if has_id:
                return JsonRPCRequestMessage(id=data["id"], method=method, jsonrpc="2.0", params=data.get("params"))
            return JsonRPCNotification(method=method, jsonrpc="2.0", params=data.get("params"))
        try:
            message = self._converter.structure(data, self._message_type(data))
        except Exception as e:  # params (or a response) of the wrong shape
            if has_id and method is not None:
                log.warning("invalid params for %s (%s)", method, e)
                self.send_error(data["id"], protocol.INVALID_PARAMS, f"invalid params for {method}")
            else:
                log.warning("dropped an invalid %s (%s)", method or "response", e)
            return None
        if has_id and method is not None and not hasattr(message, "id"):
            return self._wrong_kind(data, method)  # a notification method sent as a request
        return message

    def _message_type(self, data: dict[str, Any]) -> Any:
        """pygls' choice of message class (``JsonRPCProtocol.structure_message``), without its error logging."""
        if "id" not in data:
            return self.get_message_type(data["method"]) or JsonRPCNotification
        if "method" in data:
            return self.get_message_type(data["method"]) or JsonRPCRequestMessage
        if "error" in data:
            return types.ResponseErrorMessage
        return self._result_types.pop(data["id"], None) or JsonRPCResponseMessage

    def _invalid(self, data: Any, why: str) -> None:
        msg_id = data.get("id") if isinstance(data, dict) and _valid_id(data.get("id")) else None
        log.warning("invalid message: %s", why)
        self.send_error(msg_id, protocol.INVALID_REQUEST, f"Invalid request: {why}")

    def _wrong_kind(self, data: dict[str, Any], method: str) -> None:
        if "id" in data:
            log.warning("%s is not a request", method)
            self.send_error(data["id"], protocol.METHOD_NOT_FOUND, f"{method} is not a request")
        else:
            log.warning("dropped %s sent as a notification: it is a request", method)

    def send_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        """An error response (written as a plain dict: pygls would leave out an id of null)."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    # ------------------------------------------------------------------ lifecycle
    def handle_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        is_request = method is not None and hasattr(message, "id")
        if method == types.EXIT:
            super().handle_message(message)
        elif not self.initialize_received:
            if is_request and method == types.INITIALIZE:
                self.initialize_received = True
                super().handle_message(message)
            elif is_request:
                self.send_error(message.id, SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized")
            else:
                log.debug("dropped %s: it came before initialize", method or "a response")
        elif is_request and method == types.INITIALIZE:
            self.send_error(message.id, protocol.INVALID_REQUEST, "initialize was already received")
        elif self._shutdown:
            if is_request:
                self.send_error(message.id, protocol.INVALID_REQUEST, f"{method}: the server is shutting down")
        else:
            super().handle_message(message)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        """Ends the message loop; the process exits with 0 after ``shutdown``, else 1 (LSP)."""
        self.exit_code = 0 if self._shutdown else 1
        log.info("exit (code %d)", self.exit_code)
        yield from ()

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        """pygls' shutdown (cancel the requests in flight, refuse new ones), over a copy of the futures: each
        cancelled future leaves the dict at once (``_execute_handler``)."""
        if (handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield handler, args, None
        current = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self._shutdown = True
        return None

    # The documents live in the handlers (``lsp.documents``): pygls' workspace does not keep copies, which it
    # would rebuild line by line on every change (and fail on a change to a document that is not open).
    def _then(self, method: str, params: Any) -> Iterator[Any]:
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Iterator[Any]:
        yield from self._then(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Iterator[Any]:
        yield from self._then(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Iterator[Any]:
        yield from self._then(types.TEXT_DOCUMENT_DID_CLOSE, params)

    # ------------------------------------------------------------------ quiet where nothing is wrong
    def _send_handler_result(self, future: Any, *, msg_id: Any) -> None:
        """A handler's expected error is answered and logged in one line; anything else goes to pygls (which
        logs it with its traceback)."""
        if not future.cancelled():
            exc = future.exception()
            if isinstance(exc, JsonRpcException) and not isinstance(exc, JsonRpcInternalError):
                self._request_futures.pop(msg_id, None)
                log.log(EXPECTED.get(exc.code, logging.WARNING), "request %s: %s (%s)", msg_id, exc.message,
                        exc.code)
                self._send_response(msg_id, error=exc.to_response_error())
                return
        super()._send_handler_result(future, msg_id=msg_id)

    def _execute_handler(self, msg_id: Any, handler: Any, callback: Any, args: Any = None, kwargs: Any = None) -> None:
        """pygls files the future of every asynchronous handler under its message id, but only a request's answer
        takes it out again: each notification handled by a built-in handler (``didOpen``, ``didChange``, ...) left
        one behind, a leak of one entry per keystroke. Here every entry goes once its future is done."""

        def done(future: Any) -> None:
            if self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)

        super()._execute_handler(msg_id, handler, done, args, kwargs)

    def _run_generator(self, future: Any, *, gen: Any, result_future: Any) -> None:
        """pygls' step of a built-in handler that waits for ours; when ours was cancelled (the session ended while
        ``initialized`` loaded the model), pygls would raise the CancelledError inside an event-loop callback."""
        if future is not None and future.cancelled():
            gen.close()
            result_future.cancel()
            return
        super()._run_generator(future, gen=gen, result_future=result_future)

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        if not _valid_id(msg_id):  # the params' types are not checked strictly enough to rely on
            log.warning("$/cancelRequest with an id that is not a string or an integer: %r", msg_id)
            return
        future = self._request_futures.pop(msg_id, None)
        if future is None:  # editors cancel requests whose answer is already on its way
            log.debug("$/cancelRequest for %r, which is not in flight", msg_id)
        elif future.cancel():
            log.debug("cancelled request %r", msg_id)

    def _handle_notification(self, method_name: str, params: Any) -> None:
        if method_name.startswith("$/") and method_name != types.CANCEL_REQUEST and \
                method_name not in self.fm.features and method_name not in self.fm.builtin_features:
            log.debug("ignored %s", method_name)  # LSP: "$/" notifications a server does not know are ignored
            return
        super()._handle_notification(method_name, params)
