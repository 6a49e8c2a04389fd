// Stock Yjs clients (yjs + y-websocket's WebsocketProvider over the `ws` package), driven
// from pytest: one JSON request per stdin line, one JSON answer per stdout line.
// Requests: {seq, op, id, ...}; answers: {seq, ok: true, ...} or {seq, ok: false, error}.
// Nothing here sleeps to synchronise: every wait_* op resolves on an event, with a deadline.
import * as Y from 'yjs'
import { WebsocketProvider } from 'y-websocket'
import WebSocket from 'ws'
import readline from 'node:readline'

// Clients in one process must not share a BroadcastChannel (y-websocket syncs same-room
// providers of one "browser" through it, synchronously here): each talks only to the server.
const clients = new Map() // id -> {doc, text, provider, closed, waiters}

const send = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

function notify (c) {
  for (const w of [...c.waiters]) {
    if (w.check()) {
      c.waiters.delete(w)
      clearTimeout(w.timer)
      w.resolve()
    }
  }
}

function waitFor (c, check, timeoutMs, what) {
  return new Promise((resolve, reject) => {
    if (check()) return resolve()
    const w = { check, resolve }
    w.timer = setTimeout(() => {
      c.waiters.delete(w)
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; text is ${JSON.stringify(c.text.toString()).slice(0, 300)}; ${everyone()}`))
    }, timeoutMs)
    c.waiters.add(w)
  })
}

// What each client looks like now, for a timeout's message: a failure says who was
// connected, who was closed and with what, and which peers each one saw.
function everyone () {
  const parts = []
  for (const [id, c] of clients) {
    const seen = others(c).map((s) => JSON.stringify(s).slice(0, 60))
    parts.push(`${id}: connected=${c.provider.wsconnected} synced=${c.synced} closes=${JSON.stringify(c.closes)} ` +
      `reconnects=${c.provider.wsUnsuccessfulReconnects} peers=[${seen.join(', ')}]`)
  }
  return parts.join('; ')
}

function connect ({ id, url, room, token, headers, initial }) {
  const doc = new Y.Doc()
  const text = doc.getText('content')
  if (initial) text.insert(0, initial) // typed before the first sync (the "initial offline value")
  const params = token ? { token } : {}
  class HeaderSocket extends WebSocket {
    constructor (u, protocols) { super(u, protocols, { headers: headers || {} }) }
  }
  const provider = new WebsocketProvider(url, room, doc, { WebSocketPolyfill: HeaderSocket, params, disableBc: true })
  const c = { doc, text, provider, closed: null, waiters: new Set(), synced: false, updates: 0, closes: [] }
  provider.on('sync', (s) => { c.synced = s; notify(c) })
  provider.on('connection-close', (event) => {
    if (event) c.closed = { code: event.code, reason: event.reason ? event.reason.toString() : '' }
    c.closes.push(event ? event.code : 'local')
    notify(c)
  })
  provider.on('status', () => notify(c))
  doc.on('update', () => { c.updates++; notify(c) })
  provider.awareness.on('change', () => notify(c))
  clients.set(id, c)
  return {}
}

function others (c) {
  const out = []
  for (const [clientId, state] of c.provider.awareness.getStates()) {
    if (clientId !== c.doc.clientID) out.push(state)
  }
  return out
}

const ops = {
  connect,
  async wait_synced ({ id, timeout }) {
    const c = clients.get(id)
    await waitFor(c, () => c.synced, timeout, 'sync')
    return { text: c.text.toString() }
  },
  async wait_closed ({ id, timeout }) {
    const c = clients.get(id)
    await waitFor(c, () => c.closed !== null, timeout, 'the server to close the socket')
    return c.closed
  },
  async wait_text ({ id, equals, includes, timeout }) {
    const c = clients.get(id)
    const ok = () => {
      const t = c.text.toString()
      if (equals !== undefined && t !== equals) return false
      if (includes !== undefined && !includes.every((s) => t.includes(s))) return false
      return true
    }
    await waitFor(c, ok, timeout, equals !== undefined ? `text ${JSON.stringify(equals).slice(0, 200)}` : `text including ${JSON.stringify(includes).slice(0, 200)}`)
    return { text: c.text.toString() }
  },
  // Stay connected and idle for `ms`: did the provider keep its socket? (It closes one
  // that received nothing for 30 s.)
  async idle ({ id, ms }) {
    const c = clients.get(id)
    const closes = []
    const onClose = (event) => closes.push(event ? event.code : null)
    c.provider.on('connection-close', onClose)
    await new Promise((resolve) => setTimeout(resolve, ms))
    c.provider.off('connection-close', onClose)
    return { closes, connected: c.provider.wsconnected }
  },
  text ({ id }) {
    const c = clients.get(id)
    return { text: c.text.toString(), closed: c.closed, synced: c.synced, connected: c.provider.wsconnected }
  },
  // Type `text` one character at a time at the start of line `line` of the client's text
  // as it is now (past the last line: at the end), in one tick, so no remote update lands
  // between choosing the place and typing (tests/integration/test_convergence_mixed.py).
  type_line ({ id, line, text }) {
    const c = clients.get(id)
    const s = c.text.toString()
    const starts = [0]
    for (let i = s.indexOf('\n'); i >= 0 && i + 1 < s.length; i = s.indexOf('\n', i + 1)) starts.push(i + 1)
    let at = line < starts.length ? starts[line] : s.length
    if (at === s.length && s.length > 0 && !s.endsWith('\n')) text = '\n' + text
    for (const ch of text) {
      c.text.insert(at, ch)
      at += ch.length
    }
    return { length: c.text.length, synced: c.synced, connected: c.provider.wsconnected }
  },
  insert ({ id, index, text }) {
    const c = clients.get(id)
    c.text.insert(index < 0 ? c.text.length : index, text)
    return { length: c.text.length }
  },
  delete ({ id, index, length }) {
    const c = clients.get(id)
    c.text.delete(index, length)
    return { length: c.text.length }
  },
  // Type `text` one character (code point) at a time at `index` (-1: the end), one
  // transaction each, as an editor does.
  type ({ id, index, text }) {
    const c = clients.get(id)
    let at = index < 0 ? c.text.length : index
    for (const ch of text) {
      c.text.insert(at, ch)
      at += ch.length
    }
    return { length: c.text.length }
  },
  // Several clients type at once: one character each in turn, all in one tick of the
  // event loop, so none of them has seen another's keystrokes before it typed its own.
  // Each typing is {id, text, before} (insert before the first `before` in the text, or
  // at the end if `before` is absent).
  type_together ({ typings }) {
    const cursors = typings.map(({ id, text, before }) => {
      const c = clients.get(id)
      const s = c.text.toString()
      const at = before === undefined ? s.length : s.indexOf(before)
      if (at < 0) throw new Error(`${id}: ${JSON.stringify(before)} is not in the text`)
      return { c, chars: [...text], at }
    })
    for (let i = 0; cursors.some((k) => i < k.chars.length); i++) {
      for (const k of cursors) {
        if (i < k.chars.length) {
          k.c.text.insert(k.at, k.chars[i])
          k.at += k.chars[i].length
        }
      }
    }
    return {}
  },
  // bench/p11_live.py: `typist` types `count` characters at the end, one at a time; each
  // waits until every watcher's text has it. Latencies in ms: to the last watcher, and the
  // mean over watchers, per keystroke.
  async fanout ({ id, watchers, count, gapMs, timeout }) {
    const typist = clients.get(id)
    const ws = watchers.map((w) => clients.get(w))
    const last = []
    const mean = []
    for (let i = 0; i < count; i++) {
      const want = typist.text.length + 1
      const t0 = performance.now()
      const arrival = new Array(ws.length).fill(null)
      typist.text.insert(typist.text.length, String.fromCharCode(97 + (i % 26)))
      await Promise.all(ws.map((c, k) => waitFor(c, () => {
        if (arrival[k] === null && c.text.length >= want) arrival[k] = performance.now()
        return arrival[k] !== null
      }, timeout, `keystroke ${i} at watcher ${k}`)))
      last.push(Math.max(...arrival) - t0)
      mean.push(arrival.reduce((a, b) => a + b - t0, 0) / arrival.length)
      if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs))
    }
    return { last, mean }
  },
  awareness ({ id, state }) {
    clients.get(id).provider.awareness.setLocalState(state)
    return {}
  },
  async wait_peer_awareness ({ id, key, value, timeout }) {
    const c = clients.get(id)
    await waitFor(c, () => others(c).some((s) => s && s[key] === value), timeout, `awareness ${key}=${value}`)
    return { states: others(c) }
  },
  async wait_no_peer_awareness ({ id, key, value, timeout }) {
    const c = clients.get(id)
    await waitFor(c, () => !others(c).some((s) => s && s[key] === value), timeout, `awareness ${key}=${value} to go`)
    return { states: others(c) }
  },
  // Connect again after the server closed the socket for good (as an app would by hand),
  // keeping the document as it is.
  reconnect ({ id }) {
    const c = clients.get(id)
    c.closed = null
    c.synced = false
    c.provider.connect()
    return {}
  },
  disconnect ({ id }) {
    const c = clients.get(id)
    c.provider.destroy()
    c.doc.destroy()
    clients.delete(id)
    return {}
  }
}

const rl = readline.createInterface({ input: process.stdin })
rl.on('line', async (line) => {
  let req
  try {
    req = JSON.parse(line)
    const fn = ops[req.op]
    if (!fn) throw new Error(`unknown op ${req.op}`)
    if (!['connect', 'type_together'].includes(req.op) && !clients.has(req.id)) throw new Error(`no client ${req.id}`)
    const result = await fn(req)
    send({ seq: req.seq, ok: true, ...result })
  } catch (err) {
    send({ seq: req ? req.seq : null, ok: false, error: String(err && err.message ? err.message : err) })
  }
})
rl.on('close', () => {
  for (const c of clients.values()) c.provider.destroy()
  process.exit(0)
})
