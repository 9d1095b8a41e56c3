"""The web playground (``edit_engine/serve/playground.py`` and its ``static/`` files).

First the router without a browser (TestClient), then the page in a real headless Chromium driven by selenium
and chromedriver, against a real server (uvicorn on an ephemeral loopback port) with the packaged model. The
browser tests are skipped when chromium, chromedriver or selenium is missing (Debian: ``apt-get install
chromium chromium-driver``; ``pip install selenium``).

Every wait is selenium's ``WebDriverWait`` on a condition the page reports: ``<body data-fill>`` (idle,
connecting, streaming, done, error), ``window.__requests`` (the params of every request the page sent) and
``window.__passes`` (every pass the page showed, with the ghost text as rendered).
"""

from __future__ import annotations

import base64
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from websockets.sync.client import connect

from edit_engine import protocol as rpc
from edit_engine.engine import Engine
from edit_engine.serve import playground
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.settings import Settings
from edit_engine.syntax import positions

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as ChromeService
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the browser tests skip
    webdriver = None

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "build" / "screenshots" / "playground.png"  # a fill done, its ghost text not yet accepted
STREAMING_SCREENSHOT = SCREENSHOT.with_name("playground-streaming.png")  # the same fill after its first pass
STATIC = ROOT / "edit_engine" / "serve" / "static"
TIMEOUT = 60.0  # seconds: every wait is bounded by it
PLACEHOLDER = "\u2591"
# No line of it continues "return ": the fill is the model's, streamed pass by pass (a copy would be one pass).
DOC = ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
       "        self.items.append(item)\n\n    def pop(self):\n        return \n")
CURSOR = DOC.index("return ") + len("return ")
KEY = "s3cret?>~pl?y>"  # its base64 has '+', '/' and padding: the page must send base64url without padding

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    webdriver is None or CHROMIUM is None or CHROMEDRIVER is None,
    reason="the browser tests need chromium, chromedriver (Debian: apt-get install chromium chromium-driver) "
           "and selenium")


@contextmanager
def serving(engine: Engine, before_pass: Callable[[], None] | None = None,
            **kw: Any) -> Iterator[BackgroundServer]:
    settings = Settings(port=0, log_level="warning", **kw)
    with BackgroundServer(create_app(settings, engine=engine, before_pass=before_pass), settings) as server:
        yield server


# ---------------------------------------------------------------------------------------------------- the router
@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = FastAPI()
    app.include_router(playground.router)
    with TestClient(app) as c:
        yield c


def test_the_page_is_html_with_a_strict_content_security_policy(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self' ws: wss:" in csp
    assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
    assert r.headers["cache-control"] == "no-cache" and r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    page = r.text
    for name in playground.ASSETS:
        assert f"/playground/{name}" in page
    # Self-contained: nothing is loaded from another host, and no inline script or style.
    for text in (page, client.get("/playground/playground.js").text, client.get("/playground/playground.css").text):
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert "<script>" not in page and "<style" not in page and " style=" not in page
    assert client.head("/").status_code == 200


def test_the_assets_are_served_with_their_types_and_revalidate(client: TestClient) -> None:
    for name, media_type in playground.ASSETS.items():
        r = client.get(f"/playground/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"] == media_type
        assert r.headers["cache-control"] == "no-cache" and r.headers["content-security-policy"] == playground.CSP
        assert r.content == (STATIC / name).read_bytes()
        again = client.get(f"/playground/{name}", headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        assert client.get(f"/playground/{name}", headers={"If-None-Match": '"other"'}).status_code == 200


@pytest.mark.parametrize("path", ["/playground/nope.js", "/playground/index.html", "/playground/",
                                  "/playground/..%2Fplayground.py", "/playground/%2e%2e/app.py",
                                  "/playground/PLAYGROUND.JS", "/index.html"])
def test_an_unknown_asset_is_404(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 404


def test_every_shipped_file_is_served_and_every_served_file_shipped() -> None:
    assert {p.name for p in STATIC.iterdir()} == {playground.PAGE, *playground.ASSETS}
    assert playground.PUBLIC_PATHS == {"/", *(f"/playground/{name}" for name in playground.ASSETS)}


def test_with_a_key_the_playground_is_public_and_the_api_is_not(
        tiny_engine: Engine) -> None:
    settings = Settings(api_key=KEY)
    with TestClient(create_app(settings, engine=tiny_engine)) as c:
        for path in playground.PUBLIC_PATHS:
            assert c.get(path).status_code == 200, path
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        r = c.get("/playground/nope.js")  # in the app, a 404 comes in the API's error shape
        assert r.status_code == 401 or r.json()["error"]["code"] == "not_found"


# ---------------------------------------------------------------------------------------------------- the browser
@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    if webdriver is None or CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("the browser tests need chromium, chromedriver and selenium")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # --no-sandbox: test containers run as root, where Chromium's sandbox refuses to start; the page is ours.
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,720", "--lang=en-US"):
        options.add_argument(arg)
    d = webdriver.Chrome(options=options, service=ChromeService(executable_path=CHROMEDRIVER))
    d.set_script_timeout(TIMEOUT)
    try:
        yield d
    finally:
        d.quit()


class Gate:
    """``before_pass`` hook: the scheduler waits before every forward pass until ``open()``, or only once
    ``hold_after_pass`` has let a delivered pass through."""

    def __init__(self, open_: bool = False) -> None:
        self._open = threading.Event()
        if open_:
            self._open.set()
        self.free: Callable[[], bool] = lambda: False  # forward passes run while this holds

    def __call__(self) -> None:
        if not self.free():
            self._open.wait(TIMEOUT)

    def open(self) -> None:
        self.free = lambda: True
        self._open.set()

    def hold_after_pass(self, server: BackgroundServer) -> None:
        """Run forward passes until the server has delivered one more pass, then wait at the gate."""
        metrics = server.server.config.app.state.service.metrics  # type: ignore[attr-defined]
        delivered = metrics.passes.value()
        self.free = lambda: metrics.passes.value() < delivered + 1
        self._open.clear()


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate(open_=True)


@pytest.fixture(scope="module")
def server(packaged_engine: Engine, gate: Gate) -> Iterator[BackgroundServer]:
    with serving(packaged_engine, gate) as s:
        yield s


def until(driver: Any, check: Callable[[Any], Any], what: str) -> Any:
    return WebDriverWait(driver, TIMEOUT).until(check, message=f"timed out waiting for {what}")


def fill_state(driver: Any) -> str:
    return str(driver.find_element(By.TAG_NAME, "body").get_attribute("data-fill"))


def link(**params: Any) -> str:
    return "/?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())


def open_page(driver: Any, server: BackgroundServer, path: str = "/") -> None:
    driver.get(server.url + path)
    until(driver, lambda d: fill_state(d) == "idle", "the page to load")


def editor(driver: Any) -> Any:
    return driver.find_element(By.ID, "text")


def selection(driver: Any) -> list[int]:
    return list(driver.execute_script("const t = document.getElementById('text'); return [t.selectionStart, t.selectionEnd];"))


def keys(driver: Any, *sequence: str, ctrl: bool = False) -> None:
    """Keys typed into the focused element (the editor keeps its caret: no click, no refocus)."""
    chain = ActionChains(driver)
    if ctrl:
        chain.key_down(Keys.CONTROL)
    for k in sequence:
        chain.send_keys(k)
    if ctrl:
        chain.key_up(Keys.CONTROL)
    chain.perform()


def until_fill_ends(driver: Any) -> str:
    until(driver, lambda d: fill_state(d) in ("done", "error"), "the fill to end")
    return str(driver.find_element(By.ID, "status").text)


def ghost(driver: Any) -> str | None:
    return driver.execute_script("const g = document.querySelector('#view .ghost'); return g && g.textContent;")


def save_screenshot(driver: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(path))
    print(f"screenshot: {path}")


def replay(server: BackgroundServer, params: dict[str, Any],
           headers: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The same request straight over the websocket: its passes and its result."""
    with connect(server.ws_url, additional_headers=headers, open_timeout=TIMEOUT) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": rpc.INFILL, "params": params}))
        passes = []
        while True:
            m = json.loads(ws.recv(timeout=TIMEOUT))
            if m.get("method") == rpc.PASS:
                passes.append(m["params"])
            elif m.get("id") == 1:
                assert "result" in m, m
                return passes, m["result"]


def shown_passes(driver: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The last request the page sent and the passes it showed for it."""
    request = driver.execute_script("return window.__requests[window.__requests.length - 1];")
    passes = [p for p in driver.execute_script("return window.__passes;") if p["requestId"] == request["id"]]
    return request, passes


@needs_browser
def test_a_fill_streams_its_passes_into_the_editor(driver: Any, server: BackgroundServer, gate: Gate) -> None:
    """Ctrl+Space at the cursor: the passes stream in as ghost text (placeholders for the undecided slots) and
    end in the server's answer to the same request; Tab accepts it. The scheduler is held after the first pass,
    so the page is seen (and photographed) mid-fill."""
    open_page(driver, server, link(language="python", cursor=CURSOR, text=DOC))
    assert editor(driver).get_attribute("value") == DOC
    assert driver.execute_script("return document.activeElement.id;") == "text"
    assert selection(driver) == [CURSOR, CURSOR]
    # What the editor's overlay shows, mutation by mutation, seen from outside the page's own bookkeeping.
    driver.execute_script("""
        window.__seen = [];
        new MutationObserver(() => {
          const g = document.querySelector('#view .ghost');
          if (g && window.__seen[window.__seen.length - 1] !== g.textContent) window.__seen.push(g.textContent);
        }).observe(document.getElementById('view'), {childList: true, subtree: true, characterData: true});""")
    gate.hold_after_pass(server)
    try:
        keys(driver, " ", ctrl=True)
        first = until(driver, lambda d: d.execute_script("return window.__passes[0];"), "the first pass")
        assert first["passIndex"] == 0 and not first["final"] and PLACEHOLDER in first["shown"], first
        assert ghost(driver) == first["shown"] and fill_state(driver) == "streaming"
        assert "pass 1 · " in driver.find_element(By.ID, "status").text
        save_screenshot(driver, STREAMING_SCREENSHOT)
    finally:
        gate.open()
    status = until_fill_ends(driver)
    assert fill_state(driver) == "done", status
    request, passes = shown_passes(driver)
    assert passes[0] == first
    assert request["params"]["position"] == {"line": 8, "character": 15}
    assert "repairRounds" not in request["params"]  # asked for: the engine's full repair
    assert request["params"]["languageId"] == "python" and request["params"]["text"] == DOC
    shown = [p["shown"] for p in passes]
    assert len(passes) >= 2 and len(set(shown)) >= 2, passes
    assert any(PLACEHOLDER in s for s in shown), shown
    assert any(p["preview"] for p in passes if not p["final"]), passes
    for p in passes:  # placeholders where the undecided slots sit (else the text, then one per slot)
        assert p["shown"] == (p["preview"] or p["text"] + PLACEHOLDER * min(p["masked"], 64)), p
    assert passes[-1]["final"] and passes[-1]["masked"] == 0
    seen = driver.execute_script("return window.__seen;")
    assert len(set(seen)) >= 2 and any(PLACEHOLDER in s for s in seen) and seen[-1] == passes[-1]["text"]
    direct, result = replay(server, request["params"])
    assert [p["text"] for p in direct] == [p["text"] for p in passes]
    assert ghost(driver) == result["text"] == passes[-1]["text"]
    assert f"{result['passes']} passes" in status and f"{result['nfe']} forward passes" in status
    assert " ms" in status
    save_screenshot(driver, SCREENSHOT)
    start = positions.position_to_offset(DOC, **result["range"]["start"])
    end = positions.position_to_offset(DOC, **result["range"]["end"])
    keys(driver, Keys.TAB)
    want = DOC[:start] + result["text"] + DOC[end:]
    until(driver, lambda d: editor(d).get_attribute("value") == want, "Tab to accept the fill")
    assert ghost(driver) is None and fill_state(driver) == "idle"
    assert selection(driver)[0] == start + len(result["text"])
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors  # no script error, no refusal by the content security policy


def cancellations(server: BackgroundServer, reason: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=TIMEOUT).text
    prefix = f'edit_engine_cancellations_total{{reason="{reason}"}} '
    return next((float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix)), 0.0)


@needs_browser
def test_escape_dismisses_and_a_newer_fill_supersedes_the_older(driver: Any, packaged_engine: Engine) -> None:
    """The scheduler is held, so the requests stay in flight: Esc cancels one ($/cancelRequest); a second
    Ctrl+Space supersedes the first (same uri); once the scheduler runs, only the newest fill is shown."""
    gate = Gate()
    with serving(packaged_engine, gate) as server:
        try:
            open_page(driver, server, link(cursor=CURSOR, text=DOC))
            requests = "return window.__requests.length;"
            keys(driver, " ", ctrl=True)
            until(driver, lambda d: d.execute_script(requests) == 1 and fill_state(d) == "streaming", "request 1")
            keys(driver, Keys.ESCAPE)
            until(driver, lambda d: fill_state(d) == "idle", "Esc to dismiss the fill")
            assert ghost(driver) is None
            until(driver, lambda d: cancellations(server, "client") == 1, "the server to cancel request 1")
            keys(driver, " ", ctrl=True)
            until(driver, lambda d: d.execute_script(requests) == 2, "request 2")
            keys(driver, " ", ctrl=True)
            until(driver, lambda d: d.execute_script(requests) == 3, "request 3")
            until(driver, lambda d: cancellations(server, "superseded") == 1, "request 3 to supersede request 2")
        finally:
            gate.open()
        until_fill_ends(driver)
        assert fill_state(driver) == "done"
        request, passes = shown_passes(driver)
        assert request["id"] == 3 and passes and passes[-1]["final"]
        assert {p["requestId"] for p in driver.execute_script("return window.__passes;")} == {3}
        assert ghost(driver) == passes[-1]["text"]
        keys(driver, Keys.ESCAPE)
        assert ghost(driver) is None and editor(driver).get_attribute("value") == DOC


@needs_browser
def test_fill_as_i_type_starts_fills_after_a_pause(driver: Any, server: BackgroundServer) -> None:
    doc = "def mean(values):\n    return sum(values) / \n"
    open_page(driver, server, link(cursor=len(doc) - 1, text=doc))
    driver.find_element(By.ID, "auto").click()
    assert driver.execute_script("return document.activeElement.id;") == "text"
    keys(driver, "l", "e", "n", "(")
    typed = doc[:-1] + "len(\n"
    until(driver, lambda d: editor(d).get_attribute("value") == typed, "the typing")
    until(driver, lambda d: d.execute_script("return window.__requests.length;") >= 1, "a fill to start")
    assert until_fill_ends(driver) and fill_state(driver) == "done"
    request, passes = shown_passes(driver)
    assert request["params"]["text"] == typed and request["params"]["position"] == {"line": 1, "character": len(typed.split("\n")[1])}
    assert request["params"]["repairRounds"] == 0  # asked while typing: checked, no repair rounds
    assert driver.execute_script("return window.__requests.length;") < 4  # debounced: not one per key
    assert passes and passes[-1]["final"] and ghost(driver) == passes[-1]["text"]


@needs_browser
def test_a_link_opens_its_document(driver: Any, server: BackgroundServer) -> None:
    """``/?language=L&cursor=N&text=T``: N counts characters (code points) of T, as the server's offset does;
    the page's own link reopens the same document, language and cursor."""
    doc = "fn main() {\n    let s = \"\U0001f600\";\n    let x = \n}\n"
    cursor = doc.index("let x = ") + len("let x = ")  # code points; one more UTF-16 unit in the browser
    open_page(driver, server, link(language="rust", cursor=cursor, text=doc))
    assert editor(driver).get_attribute("value") == doc
    assert selection(driver)[0] == cursor + 1
    assert driver.find_element(By.ID, "language").get_attribute("value") == "rust"
    href = until(driver, lambda d: (h := d.find_element(By.ID, "link").get_attribute("href")) != server.url + "/"
                 and h, "the page's link")
    assert href.startswith(server.url + "/?language=rust&cursor=" + str(cursor) + "&text=")
    open_page(driver, server, href[len(server.url):].replace("/?", "/#", 1))  # the fragment form works too
    assert editor(driver).get_attribute("value") == doc
    assert selection(driver)[0] == cursor + 1
    open_page(driver, server, link(language="cobol", text="x = 1\r\ny = "))
    assert editor(driver).get_attribute("value") == "x = 1\ny = "
    assert selection(driver)[0] == len("x = 1\ny = ")
    assert driver.find_element(By.ID, "language").get_attribute("value") == "python"
    assert "unknown language cobol" in driver.find_element(By.ID, "status").text
    driver.get(server.url + link(cursor=CURSOR, text=DOC, fill=1))  # fill=1: start a fill at once
    assert until_fill_ends(driver) and fill_state(driver) == "done"
    assert shown_passes(driver)[0]["params"]["position"] == {"line": 8, "character": 15}


def key_state(driver: Any) -> str:
    return str(driver.find_element(By.ID, "key-state").get_attribute("data-state"))


def enter_key(driver: Any, key: str) -> None:
    field = driver.find_element(By.ID, "key")
    field.clear()
    field.send_keys(key, Keys.ENTER)


@needs_browser
def test_the_api_key_is_entered_in_the_page(driver: Any, packaged_engine: Engine) -> None:
    """With ``--api-key`` the page loads without the key; the key typed into the page is kept in sessionStorage
    (never in a URL) and checked; the websocket carries it as the subprotocol ``bearer.<base64url(key)>`` and the
    server answers ``edit-engine``.

    The last part relies on the server taking the key from the websocket's subprotocols (``ws.py``); a server
    that does not fails at the first direct handshake below, with a message that says so."""
    token = base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    assert base64.b64encode(KEY.encode()).decode() != token + "="  # the two alphabets differ for this key
    with serving(packaged_engine, api_key=KEY) as server:
        open_page(driver, server, link(cursor=CURSOR, text=DOC))
        until(driver, lambda d: key_state(d) == "needed", "the page to see that the server needs a key")
        keys(driver, " ", ctrl=True)
        status = until_fill_ends(driver)
        assert fill_state(driver) == "error" and "API key" in status
        enter_key(driver, "wrong")
        until(driver, lambda d: key_state(d) == "wrong", "the wrong key to be refused")
        enter_key(driver, KEY)
        until(driver, lambda d: key_state(d) == "ok", "the key to be accepted")
        assert driver.execute_script("return sessionStorage.getItem('edit-engine.apiKey');") == KEY
        driver.refresh()
        until(driver, lambda d: key_state(d) == "ok", "the key to be kept across a reload")
        assert driver.find_element(By.ID, "key").get_attribute("value") == KEY
        for secret in (KEY, quote(KEY, safe=""), token):
            assert secret not in driver.current_url
            assert secret not in str(driver.find_element(By.ID, "link").get_attribute("href"))
        # ---- from here on the server must take the key from the websocket's subprotocols
        try:
            with connect(server.ws_url, subprotocols=["edit-engine", f"bearer.{token}"],  # type: ignore[list-item]
                         open_timeout=TIMEOUT) as ws:
                assert ws.subprotocol == "edit-engine"
        except Exception as e:
            pytest.fail(f"the server does not accept the API key as the websocket subprotocol 'bearer.<base64url>'"
                        f" yet ({type(e).__name__}: {e})")
        editor(driver).click()
        driver.execute_script(f"document.getElementById('text').setSelectionRange({CURSOR}, {CURSOR});")
        keys(driver, " ", ctrl=True)
        status = until_fill_ends(driver)
        assert fill_state(driver) == "done", status
        assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-protocol") == "edit-engine"
        request, passes = shown_passes(driver)
        _, result = replay(server, request["params"], headers={"Authorization": f"Bearer {KEY}"})
        assert passes and ghost(driver) == result["text"] == passes[-1]["text"]
