"""The coding page's guard in the browser: presses dropped while a mention is too new or its page is being drawn,
and a press the server has not answered, said on the page (written by hand: Streamlit has no hook for
either)."""

import json

#: The browser's half of the coding page's dwell rule (app_pages/coding_queue.py MIN_GAP_S): the server measures
#: from when it drew a mention to when it runs the click, so a loaded server can run late a key pressed 0.1 s
#: after the page changed. In the page itself (a script added once to the app's document, outside the
#: script's frame), every key press that is not typing and every click on a main-area button within
#: MIN_MS of the mention on screen changing is dropped before Streamlit sees it. "Changing" is the mention's
#: text or the hidden echo of its id: a held key decided mentions 17-180 ms after their text showed while the
#: echo, drawn last, still named the previous one; a change of the text is seen by a MutationObserver at once.
#: Presses are dropped too while the page is being drawn: Streamlit keeps the run before's buttons (data-stale)
#: live until their new copies come, and under load a click 1 s after the next mention's text showed reached
#: the previous mention's Skip. A dropped press is said on the page (#tn-not-yet), never lost without a word.
#: So is a press the server has not answered within WAIT_MS (no run began): a browser test lost a Skip that way
#: twice while another engine was being built, with nothing on the page; the press may be repeated safely (a
#: decision names its mention, and the server refuses a second one).
_DWELL_GUARD = """
(function () {
  const w = window;
  if (w.__tnDwell) { w.__tnDwell.ms = MIN_MS; return; }
  const g = w.__tnDwell = {ms: MIN_MS, id: null, shownAt: 0};
  // the echo field is drawn last, up to a second after the mention's text: a change of either restarts the dwell
  const onScreen = () => {
    const el = document.querySelector('.st-key-_on_screen input');
    const t = document.querySelector('[data-testid="stMain"] .tn-mention');
    return el ? el.value + '|' + (t ? t.textContent : '') : null;
  };
  const mark = () => { const v = onScreen(); if (v !== g.id) { g.id = v; g.shownAt = Date.now(); } };
  // a DOM change is seen before the next key event runs (an observer's callback is a microtask of the task that
  // drew it): a poll alone ran late under load, after key presses queued while the page was being drawn
  new MutationObserver(mark).observe(document.body, {subtree: true, childList: true, characterData: true});
  setInterval(mark, 20);  // the echo's value is a property, not a DOM change: polled
  const early = () => g.id !== null && Date.now() - g.shownAt < g.ms;
  // the coding page (its echo field is there) in the middle of a run: buttons of the run before still shown
  const drawing = () => !!document.querySelector('.st-key-_on_screen')
    && !!document.querySelector('[data-testid="stMain"] [data-stale="true"] button');
  const why = () => drawing() ? 'the page is still being drawn'
    : early() ? 'the mention or its buttons appeared less than ' + (g.ms / 1000) + ' s ago' : null;
  const say = (text) => {
    let n = document.getElementById('tn-not-yet');
    if (!n) {
      n = document.createElement('div');
      n.id = 'tn-not-yet'; n.setAttribute('data-testid', 'tn-not-yet'); n.setAttribute('role', 'status');
      n.style.cssText = 'position:fixed;bottom:1.2rem;left:50%;transform:translateX(-50%);z-index:100000;'
        + 'background:#fff4e5;color:#663c00;border:1px solid #f0b45e;border-radius:.5rem;padding:.5rem 1rem;'
        + 'font:0.95rem sans-serif;box-shadow:0 2px 8px rgba(0,0,0,.15)';
      document.body.appendChild(n);
    }
    n.textContent = text;
    n.style.display = 'block';
    clearTimeout(g.hide); g.hide = setTimeout(() => { n.style.display = 'none'; }, 2500);
  };
  const drop = (e, reason) => {
    e.stopImmediatePropagation(); e.preventDefault();
    say('Not taken: ' + reason + '. Nothing saved by this press; press again once the page is still, if you '
        + 'meant it for the mention then on screen.');
  };
  // a run the server starts sets the app's script state to running: a press it answered is followed by one, or
  // by the next mention; the end of a run begun before the press is no answer (a browser test: the click sent
  // nothing while the run before was finishing, and that run's end was taken for one)
  g.starts = 0; g.changes = 0;
  const state = () => { const a = document.querySelector('[data-testid="stApp"]');
                        return a && a.getAttribute('data-test-script-state'); };
  new MutationObserver((records) => {
    const now = records.map((r) => r.oldValue).slice(1).concat([state()]);  // each change's new value, in order
    g.starts += now.filter((v) => v === 'running').length; g.changes += now.length;
  }).observe(document.body,
    {subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ['data-test-script-state']});
  const answered = () => {
    const starts = g.starts, changes = g.changes, id = g.id, idle = state() !== 'running', at = Date.now();
    clearInterval(g.wait);
    g.wait = setInterval(() => {
      if (g.starts !== starts || g.id !== id || (idle && g.changes !== changes)) { clearInterval(g.wait); return; }
      if (Date.now() - at < WAIT_MS) return;
      clearInterval(g.wait);
      say('Your press has not reached the server yet: nothing is saved until it does. If the page does not '
          + 'change, press again.');
    }, 100);
  };
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.isContentEditable)) return;
    if (e.ctrlKey || e.metaKey || e.altKey || e.key.length !== 1) return;  // not a decision key (Esc, Tab, a copy)
    const reason = why(); if (reason) { drop(e, reason); return; }
    if (document.querySelector('.st-key-_on_screen') && KEYS.includes(e.key.toLowerCase())) answered();
  }, true);
  document.addEventListener('click', (e) => {
    const b = e.target && e.target.closest && e.target.closest('[data-testid="stMain"] button');
    const reason = b && why(); if (reason) { drop(e, reason); return; }
    if (b && b.matches('[data-testid^="stBaseButton"]') && document.querySelector('.st-key-_on_screen')) answered();
  }, true);
})();
"""


def dwell_guard_html(min_seconds: float, keys: str = "", wait_s: float = 3.0) -> str:
    """A page script's HTML (_ui.page_script) that installs :data:`_DWELL_GUARD` in the app's document (same origin);
    ``keys``: the page's shortcut keys (a press of another key starts no run)."""
    code = (_DWELL_GUARD.replace("MIN_MS", str(int(round(min_seconds * 1000))))
            .replace("WAIT_MS", str(int(round(wait_s * 1000)))).replace("KEYS", json.dumps(keys.lower())))
    return ("<script>const d = window.parent.document; if (!window.parent.__tnDwell) {"
            " const s = d.createElement('script'); s.textContent = " + json.dumps(code) + "; d.head.appendChild(s); }"
            " else { window.parent.__tnDwell.ms = " + str(int(round(min_seconds * 1000))) + "; }</script>")
