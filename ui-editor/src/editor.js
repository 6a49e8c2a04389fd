// The note page's live editor: a Yjs client of the daemon's y-websocket endpoint
// (SPEC §6.13: /v1/vaults/{vault}/yjs/{path}, one Y.Text named "content"), bound to a
// plain <textarea>. The page's session cookie authenticates it; its edits are the
// page's (source "ui"). Built once into daemon/ui/static/editor.js (npm run build).
import * as Y from 'yjs'
import { WebsocketProvider } from 'y-websocket'

const area = document.getElementById('editor')
const statusLine = document.getElementById('editor-status')

function say (text) {
  if (statusLine) statusLine.textContent = text
}

// Common prefix/suffix of two strings: the one splice turning `before` into `after`.
function splice (before, after) {
  let start = 0
  const max = Math.min(before.length, after.length)
  while (start < max && before.charCodeAt(start) === after.charCodeAt(start)) start++
  let endB = before.length
  let endA = after.length
  while (endB > start && endA > start && before.charCodeAt(endB - 1) === after.charCodeAt(endA - 1)) {
    endB--
    endA--
  }
  return { start, remove: endB - start, insert: after.slice(start, endA) }
}

if (area) {
  const doc = new Y.Doc()
  const text = doc.getText('content')
  const provider = new WebsocketProvider(area.dataset.ws, area.dataset.path, doc, { maxBackoffTime: 5000 })
  let shown = area.value
  let failures = 0
  area.readOnly = true
  say('Connecting…')

  provider.on('status', (event) => {
    if (event.status === 'connected') {
      failures = 0
      say('Connected')
    } else if (event.status === 'disconnected') {
      area.readOnly = true
    }
  })
  provider.on('sync', (synced) => {
    if (!synced) return
    shown = text.toString()
    area.value = shown
    area.readOnly = false
    say('Live: your edits are saved as you type.')
  })
  // Every failed or lost connection (y-websocket retries with a backoff).
  provider.on('connection-close', (event) => {
    failures++
    area.readOnly = true
    if (event && event.code >= 4000) {
      say(`Live editing closed by the daemon (${event.code}${event.reason ? ': ' + event.reason : ''}).`)
    } else {
      say(failures > 2 ? 'Live editing is unavailable (the daemon refused or is not reachable); retrying.'
        : 'Reconnecting…')
    }
  })

  // Remote changes: keep the caret where it was relative to the text around it.
  text.observe((event) => {
    if (event.transaction.origin === area) return
    const selStart = area.selectionStart
    const selEnd = area.selectionEnd
    let newStart = selStart
    let newEnd = selEnd
    let index = 0
    for (const op of event.delta) {
      if (op.retain !== undefined) index += op.retain
      else if (op.insert !== undefined) {
        const n = op.insert.length
        if (index <= newStart) newStart += n
        if (index < newEnd) newEnd += n
        index += n
      } else if (op.delete !== undefined) {
        const n = op.delete
        if (index < newStart) newStart -= Math.min(n, newStart - index)
        if (index < newEnd) newEnd -= Math.min(n, newEnd - index)
      }
    }
    shown = text.toString()
    area.value = shown
    if (document.activeElement === area) area.setSelectionRange(newStart, newEnd)
  })

  area.addEventListener('input', () => {
    const now = area.value
    const s = splice(shown, now)
    shown = now
    if (s.remove === 0 && s.insert === '') return
    doc.transact(() => {
      if (s.remove > 0) text.delete(s.start, s.remove)
      if (s.insert) text.insert(s.start, s.insert)
    }, area)
  })
}
