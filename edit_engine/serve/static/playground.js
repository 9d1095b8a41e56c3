// The edit-engine playground: fills at the cursor streamed over the server's websocket (JSON-RPC 2.0 on
// /v1/stream). Each editEngine/pass notification carries the whole span so far (text), how many slots are
// still undecided (masked) and, while some slot of the canvas is masked, the span with a placeholder where each
// sits (preview); the page shows the preview (else the text) as ghost text at the cursor, placeholders dim, and
// replaces it on every pass. Tab accepts, Esc dismisses.
//
// For diagnostics the page keeps window.__requests (the params of every request it sent) and window.__passes
// (every pass it showed: the pass and the ghost text as the page rendered it); <body data-fill> says where the
// current fill stands: idle, connecting, streaming, done or error.
'use strict';

(() => {
  const LANGUAGES = ['python', 'javascript', 'typescript', 'tsx', 'rust', 'go'];
  const INDENT = { python: '    ', javascript: '  ', typescript: '  ', tsx: '  ', rust: '    ', go: '\t' };
  const KEY_STORE = 'edit-engine.apiKey';
  const URI = 'playground:///document';
  const PLACEHOLDER = '\u2591';
  const MAX_PLACEHOLDERS = 64;
  const SLOT_RUNS = /(\u2591+)/;
  const DEBOUNCE_MS = 300;
  const MAX_QUERY_LINK = 8000; // longer links carry the document in the fragment (never sent to a server)
  const MAX_DIAGNOSTICS = 1000;
  const CANCELLED = -32800;
  const SAMPLE = [
    'class Stack:',
    '    def __init__(self):',
    '        self.items = []',
    '',
    '    def push(self, item):',
    '        self.items.append(item)',
    '',
    '    def pop(self):',
    '        return ',
    '',
    '    def __len__(self):',
    '        return len(self.items)',
    '',
  ].join('\n');
  const SAMPLE_CURSOR = SAMPLE.indexOf('return ') + 'return '.length;

  const byId = (id) => document.getElementById(id);
  const ui = {
    text: byId('text'), view: byId('view'), language: byId('language'), auto: byId('auto'),
    fill: byId('fill'), link: byId('link'), keyForm: byId('key-form'), key: byId('key'),
    keyForget: byId('key-forget'), keyState: byId('key-state'), status: byId('status'),
  };
  const state = {
    socket: null, socketKey: '', opening: null, nextId: 1, fill: null, version: 0,
    timer: 0, linkTimer: 0, accepting: false, keyCheck: 0,
  };
  window.__requests = [];
  window.__passes = [];

  // ------------------------------------------------------------------ positions
  // The textarea's value has '\n' line ends only; indices are UTF-16 code units, as the server's default
  // positionEncoding counts them.
  function toPosition(text, index) {
    const before = text.slice(0, index);
    const lineStart = before.lastIndexOf('\n') + 1;
    return { line: before.split('\n').length - 1, character: index - lineStart };
  }

  function toIndex(text, pos) {
    let start = 0;
    for (let line = 0; line < pos.line; line++) {
      const nl = text.indexOf('\n', start);
      if (nl < 0) return text.length;
      start = nl + 1;
    }
    const end = text.indexOf('\n', start);
    return Math.min(start + pos.character, end < 0 ? text.length : end);
  }

  // Links count the cursor in characters (code points), as the server's `offset` does.
  function codePointsToIndex(text, count) {
    let i = 0;
    for (let k = 0; k < count && i < text.length; k++) i += text.codePointAt(i) > 0xffff ? 2 : 1;
    return i;
  }

  function indexToCodePoints(text, index) {
    let count = 0;
    for (let i = 0; i < index; count++) i += text.codePointAt(i) > 0xffff ? 2 : 1;
    return count;
  }

  // ------------------------------------------------------------------ the API key
  function currentKey() {
    return sessionStorage.getItem(KEY_STORE) || '';
  }

  function base64url(text) {
    let binary = '';
    for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
    return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }

  function setKey(key) {
    if (key) sessionStorage.setItem(KEY_STORE, key);
    else sessionStorage.removeItem(KEY_STORE);
    dismiss();
    closeSocket();
    checkKey();
  }

  // Whether the server wants a key and takes this one, asked of GET /v1/models (a fetch may send the
  // Authorization header; a websocket may not, so the socket carries the key in its subprotocols).
  async function checkKey() {
    const key = currentKey();
    const check = ++state.keyCheck;
    let verdict;
    try {
      const headers = key ? { Authorization: 'Bearer ' + key } : {};
      const r = await fetch('/v1/models', { headers, cache: 'no-store', credentials: 'omit' });
      if (r.ok) verdict = key ? ['ok', 'key accepted'] : ['none', 'no key needed'];
      else if (r.status === 401) verdict = key ? ['wrong', 'wrong key'] : ['needed', 'this server needs an API key'];
      else verdict = ['error', `server answered ${r.status}`];
    } catch (err) {
      verdict = ['error', /[^\x20-\x7e]/.test(key) ? 'a key must be printable ASCII' : 'server unreachable'];
    }
    if (check !== state.keyCheck) return;
    ui.keyState.dataset.state = verdict[0];
    ui.keyState.textContent = verdict[1];
  }

  // ------------------------------------------------------------------ the websocket
  function socketUrl() {
    return `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/v1/stream`;
  }

  function closeSocket() {
    const ws = state.socket;
    state.socket = null;
    state.opening = null;
    if (ws) ws.close(1000);
  }

  function openSocket() {
    const key = currentKey();
    if (state.socket && state.socketKey === key) {
      if (state.socket.readyState === WebSocket.OPEN) return Promise.resolve(state.socket);
      if (state.opening) return state.opening;
    }
    closeSocket();
    const ws = key ? new WebSocket(socketUrl(), ['edit-engine', 'bearer.' + base64url(key)])
      : new WebSocket(socketUrl());
    state.socket = ws;
    state.socketKey = key;
    state.opening = new Promise((resolve, reject) => {
      ws.onopen = () => {
        if (state.socket === ws) state.opening = null;
        document.body.dataset.protocol = ws.protocol; // the subprotocol the server chose (diagnostics)
        resolve(ws);
      };
      ws.onclose = (event) => {
        onSocketClosed(ws, event);
        reject(new Error(key ? 'could not open the websocket: wrong API key, or the server is unreachable'
          : 'could not open the websocket: does the server need an API key? Or it is unreachable'));
      };
    });
    ws.onmessage = (event) => onMessage(ws, event.data);
    return state.opening;
  }

  function onSocketClosed(ws, event) {
    if (state.socket === ws) {
      state.socket = null;
      state.opening = null;
    }
    const f = state.fill;
    if (f && f.socket === ws && !f.done) {
      state.fill = null;
      render();
      fail(`the connection closed (${event.code}${event.reason ? ': ' + event.reason : ''})`);
    }
  }

  function onMessage(ws, data) {
    if (ws !== state.socket) return;
    let msg;
    try {
      msg = JSON.parse(data);
    } catch (err) {
      return;
    }
    if (msg && msg.method === 'editEngine/pass') onPass(msg.params);
    else if (msg && 'id' in msg) onAnswer(msg);
  }

  function send(ws, msg) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
  }

  // ------------------------------------------------------------------ fills
  function remember(list, item) {
    list.push(item);
    if (list.length > MAX_DIAGNOSTICS) list.splice(0, list.length - MAX_DIAGNOSTICS);
  }

  // ``typing``: started by the debounce after an edit (no repair rounds: the fill is checked and cut to its longest
  // prefix that parses, as the language server does while the user types); Ctrl+Space and the button run them.
  async function startFill(typing = false) {
    clearTimeout(state.timer);
    const t = ui.text;
    const doc = t.value;
    const cursor = t.selectionStart;
    const selEnd = t.selectionEnd;
    // A newer fill supersedes the older: the server cancels a request when a newer one names the same uri.
    const f = {
      id: state.nextId++, doc, cursor, selEnd, start: cursor, end: selEnd, text: '', masked: 0, passIndex: -1,
      final: false, done: false, result: null, acceptWhenDone: false, socket: null, t0: performance.now(),
    };
    state.fill = f;
    render();
    setStatus('connecting', 'connecting…');
    let ws;
    try {
      ws = await openSocket();
    } catch (err) {
      if (state.fill === f) {
        state.fill = null;
        render();
        fail(err.message);
      }
      return;
    }
    if (state.fill !== f) return; // dismissed or superseded while the socket opened
    const params = {
      text: doc, position: toPosition(doc, cursor), positionEncoding: 'utf-16', languageId: ui.language.value,
      uri: URI, version: state.version,
    };
    if (selEnd > cursor) params.range = { start: toPosition(doc, cursor), end: toPosition(doc, selEnd) };
    if (typing) params.repairRounds = 0;
    f.socket = ws;
    f.t0 = performance.now();
    remember(window.__requests, { id: f.id, params });
    send(ws, { jsonrpc: '2.0', id: f.id, method: 'editEngine/infill', params });
    setStatus('streaming', 'filling…');
  }

  function onPass(p) {
    const f = state.fill;
    if (!f || p.requestId !== f.id || f.done) return;
    f.text = p.text;
    f.preview = p.final ? '' : (p.preview || '');
    f.masked = p.masked;
    f.final = p.final;
    f.passIndex = p.passIndex;
    if (p.range) {
      f.start = toIndex(f.doc, p.range.start);
      f.end = toIndex(f.doc, p.range.end);
    }
    render();
    const ghost = ui.view.querySelector('.ghost');
    remember(window.__passes, {
      requestId: p.requestId, passIndex: p.passIndex, final: p.final, masked: p.masked, text: p.text,
      preview: p.preview || '',
      shown: ghost ? ghost.textContent : null,
    });
    const ms = Math.round(performance.now() - f.t0);
    setStatus('streaming', `pass ${p.passIndex + 1} · ${p.masked} slots undecided · ${ms} ms`);
  }

  function onAnswer(msg) {
    const f = state.fill;
    if (!f || msg.id !== f.id) return; // an older request's answer (cancelled or superseded)
    f.done = true;
    if (msg.error) {
      state.fill = null;
      render();
      if (msg.error.code === CANCELLED) setStatus('idle', 'cancelled');
      else fail(`error ${msg.error.code}: ${msg.error.message}`);
      return;
    }
    const r = msg.result;
    f.result = r;
    f.text = r.text;
    f.preview = '';
    f.masked = 0;
    f.final = true;
    f.passIndex = Math.max(f.passIndex, r.passes - 1);
    if (r.range) {
      f.start = toIndex(f.doc, r.range.start);
      f.end = toIndex(f.doc, r.range.end);
    }
    render();
    const summary = `${r.passes} passes · ${r.nfe} forward passes · ${r.elapsedMs.toFixed(1)} ms · ${r.stopReason}`;
    setStatus('done', r.text ? summary : `${summary} · nothing to insert here`);
    if (f.acceptWhenDone) accept();
  }

  function cancel(f) {
    if (f && !f.done && f.socket) send(f.socket, { jsonrpc: '2.0', method: '$/cancelRequest', params: { id: f.id } });
  }

  function dismiss() {
    const f = state.fill;
    if (!f) return;
    state.fill = null;
    cancel(f);
    render();
    setStatus('idle', f.done ? 'dismissed' : 'cancelled');
  }

  // The fill as it stands replaces its span; one still streaming is accepted when it is done.
  function accept() {
    const f = state.fill;
    if (!f || f.doc !== ui.text.value) return false;
    if (!f.done) {
      f.acceptWhenDone = true;
      setStatus('streaming', 'accepting when the fill is done…');
      return true;
    }
    state.fill = null;
    if (f.text || f.end > f.start) replaceRange(f.start, f.end, f.text);
    render();
    setStatus('idle', f.text ? 'accepted' : 'nothing to insert');
    return true;
  }

  // Through the editing commands where the browser has them, so that undo works.
  function replaceRange(start, end, text) {
    const t = ui.text;
    t.focus();
    t.setSelectionRange(start, end);
    state.accepting = true;
    try {
      if (!text || !document.execCommand('insertText', false, text)) {
        t.setRangeText(text, start, end, 'end');
        onInput();
      }
    } finally {
      state.accepting = false;
    }
  }

  // ------------------------------------------------------------------ rendering
  function span(cls, text) {
    const s = document.createElement('span');
    s.className = cls;
    s.textContent = text;
    return s;
  }

  function render() {
    const doc = ui.text.value;
    const f = state.fill;
    if (!f || f.doc !== doc || f.passIndex < 0) {
      ui.view.replaceChildren(doc + '\n');
    } else {
      const ghost = span('ghost', '');
      if (f.preview) {
        // placeholders where the undecided slots sit
        for (const part of f.preview.split(SLOT_RUNS)) {
          if (part) ghost.append(part.startsWith(PLACEHOLDER) ? span('slots', part) : part);
        }
      } else {
        ghost.append(f.text);
        if (f.masked > 0) ghost.append(span('slots', PLACEHOLDER.repeat(Math.min(f.masked, MAX_PLACEHOLDERS))));
      }
      const nodes = [doc.slice(0, f.start)];
      if (f.end > f.start) nodes.push(span('replaced', doc.slice(f.start, f.end)));
      nodes.push(ghost, doc.slice(f.end) + '\n');
      ui.view.replaceChildren(...nodes);
    }
    syncScroll();
  }

  function syncScroll() {
    ui.view.scrollTop = ui.text.scrollTop;
    ui.view.scrollLeft = ui.text.scrollLeft;
  }

  function setStatus(fill, message) {
    document.body.dataset.fill = fill;
    ui.status.textContent = message;
  }

  function fail(message) {
    setStatus('error', message);
  }

  // ------------------------------------------------------------------ links
  function linkTo() {
    const doc = ui.text.value;
    const query = `language=${encodeURIComponent(ui.language.value)}`
      + `&cursor=${indexToCodePoints(doc, ui.text.selectionStart)}&text=${encodeURIComponent(doc)}`;
    return query.length <= MAX_QUERY_LINK ? `/?${query}` : `/#${query}`;
  }

  function updateLink() {
    clearTimeout(state.linkTimer);
    state.linkTimer = setTimeout(() => { ui.link.href = linkTo(); }, 100);
  }

  // /?language=L&cursor=N&text=T (or the same after '#'); N counts characters (code points) of T.
  function openFromLink() {
    const params = new URLSearchParams(location.search);
    if (location.hash.length > 1) {
      for (const [name, value] of new URLSearchParams(location.hash.slice(1))) params.set(name, value);
    }
    const language = params.get('language');
    ui.language.value = LANGUAGES.includes(language) ? language : 'python';
    const given = params.get('text');
    const raw = given === null ? SAMPLE : given;
    let index = raw.length;
    if (given === null) index = SAMPLE_CURSOR;
    else if (/^\d+$/.test(params.get('cursor') || '')) index = codePointsToIndex(raw, Number(params.get('cursor')));
    // The textarea stores '\n' line ends; the cursor moves with the text.
    ui.text.value = raw.replace(/\r\n?/g, '\n');
    const cursor = raw.slice(0, index).replace(/\r\n?/g, '\n').length;
    ui.text.focus();
    ui.text.setSelectionRange(cursor, cursor);
    const note = language !== null && !LANGUAGES.includes(language) ? `unknown language ${language}: Python · ` : '';
    return { note, fill: params.get('fill') === '1' };
  }

  // ------------------------------------------------------------------ events
  function onInput() {
    state.version++;
    if (state.fill) dismiss();
    render();
    updateLink();
    if (ui.auto.checked && !state.accepting) {
      clearTimeout(state.timer);
      state.timer = setTimeout(() => startFill(true), DEBOUNCE_MS);
    }
  }

  function onKeyDown(e) {
    const plain = !e.altKey && !e.metaKey;
    if (e.ctrlKey && plain && (e.code === 'Space' || e.key === ' ')) {
      e.preventDefault();
      startFill();
    } else if (e.key === 'Escape' && state.fill) {
      e.preventDefault();
      clearTimeout(state.timer);
      dismiss();
    } else if (e.key === 'Tab' && plain && !e.ctrlKey && !e.shiftKey) {
      e.preventDefault();
      if (!accept()) replaceRange(ui.text.selectionStart, ui.text.selectionEnd, INDENT[ui.language.value]);
    }
  }

  // Moving the cursor away from a fill dismisses it.
  function onSelectionChange() {
    const f = state.fill;
    if (f && document.activeElement === ui.text
        && (ui.text.selectionStart !== f.cursor || ui.text.selectionEnd !== f.selEnd)) dismiss();
    updateLink();
  }

  function init() {
    const opened = openFromLink();
    ui.key.value = currentKey();
    ui.text.addEventListener('input', onInput);
    ui.text.addEventListener('keydown', onKeyDown);
    ui.text.addEventListener('scroll', syncScroll);
    document.addEventListener('selectionchange', onSelectionChange);
    ui.language.addEventListener('change', () => { dismiss(); updateLink(); ui.text.focus(); });
    ui.auto.addEventListener('change', () => ui.text.focus());
    ui.fill.addEventListener('click', () => { ui.text.focus(); startFill(); });
    ui.keyForm.addEventListener('submit', (e) => { e.preventDefault(); setKey(ui.key.value); });
    ui.keyForget.addEventListener('click', () => { ui.key.value = ''; setKey(''); });
    render();
    updateLink();
    checkKey();
    setStatus('idle', `${opened.note}Ctrl+Space fills at the cursor`);
    if (opened.fill) startFill();
  }

  init();
})();
