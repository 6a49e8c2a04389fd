// Activity page: the vault's event stream (SSE, SPEC §6.9), newest first. Text only
// (textContent), never HTML, so nothing a note or path holds can run.
(function () {
  'use strict'
  const list = document.getElementById('live')
  const status = document.getElementById('live-status')
  if (!list || !window.EventSource) return
  const KINDS = ['note.changed', 'note.moved', 'note.deleted', 'version.created', 'conflict.refused',
    'brake.held', 'brake.released', 'peer.connected', 'peer.disconnected']
  const MAX = 200

  function describe (type, data) {
    const who = data.source || data.token || data.device || ''
    const what = data.path || data.newPath || data.device || ''
    const parts = [type]
    if (what) parts.push(what)
    if (data.oldPath) parts.push('(from ' + data.oldPath + ')')
    if (data.kind) parts.push('[' + data.kind + ']')
    if (data.code) parts.push('refused: ' + data.code)
    if (who) parts.push('by ' + who)
    return parts.join(' ')
  }

  const source = new EventSource(list.dataset.events)
  source.onopen = function () { status.textContent = 'Live: new events appear here as they happen.' }
  source.onerror = function () { status.textContent = 'The event stream is interrupted; reconnecting…' }
  KINDS.forEach(function (type) {
    source.addEventListener(type, function (event) {
      let data = {}
      try { data = JSON.parse(event.data) } catch (e) { return }
      const item = document.createElement('li')
      const time = document.createElement('time')
      time.textContent = new Date().toLocaleTimeString() + ' '
      item.appendChild(time)
      item.appendChild(document.createTextNode(describe(type, data)))
      item.dataset.type = type
      status.after(item)
      while (list.children.length > MAX + 1) list.lastElementChild.remove()
    })
  })
})()
