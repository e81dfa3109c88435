"""Type-ahead in a real browser on a large vocabulary: from a coder's last keystroke in the coding page's search box
to the results of what they typed drawn on screen.

The vocabulary is benchmarks/large_vocab.py's (``--names``, default 400,000: real names, then composed ones),
loaded into a fresh SQLite database with a one-mention batch; ``streamlit run app.py`` serves it (sign-in off);
Debian's Chromium, driven by Playwright, types each query one character at a time (``--delay`` ms apart, as a
coder types). In the page, an input listener notes the time of the last keystroke (the box's text changed), and a
check on every animation frame, running from before the first keystroke, notes when the first three results under
the search box are the three the engine gives for the whole query (computed beforehand by the same engine, built
from the same database and index cache). A query whose last prefix already shows those three is left out (its
finish could not be told apart). Latency = the second time minus the first, both ``performance.now()`` in the
page: the server's run, the websocket and the drawing all count. Two configurations, each a fresh app: as
shipped (``search_pause_ms`` 0: every keystroke searches; no garbage collection after each run,
.streamlit/config.toml) and Streamlit's defaults (a 250 ms typing pause before the search, ``--runner.postScriptGC
true``).

    python3 benchmarks/typeahead_browser.py                  # 400,000 names (loading them: a few minutes)
    python3 benchmarks/typeahead_browser.py --names 40000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WATCH = """([terms]) => {
  // checks on every animation frame, from before the first keystroke, until the results are the expected ones
  window.__tnFound = undefined;
  const tick = () => {
    const box = document.querySelector('input[aria-label="Search the vocabulary"]');
    const after = box ? Array.from(document.querySelectorAll('.tn-code')).filter(
        e => box.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING).slice(0, terms.length) : [];
    if (after.length === terms.length && after.every((e, i) => e.parentElement.innerText.includes(terms[i]))) {
      window.__tnFound = performance.now();
      return;
    }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}"""

def queries(n: int) -> list[str]:
    from benchmarks.large_vocab import mentions

    out = []
    for m in mentions():
        q = m.strip()[:5]
        if len(q) >= 3 and q not in out:
            out.append(q)
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--names", type=int, default=400_000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--delay", type=int, default=150, help="ms between keystrokes")
    ap.add_argument("--pause-before-last", type=int, default=0,
                    help="type all but the last character, wait this many ms, then type it (a rerun without a "
                         "backlog of earlier keystrokes)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "typeahead")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "typeahead_browser.json"))
    args = ap.parse_args()
    work = args.work / str(args.names)
    fresh = not (work / "app.sqlite3").exists()
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    url = f"sqlite:///{work / 'app.sqlite3'}"
    os.environ.update(TERMNORM_DATA_DIR=str(work / "data"), TERMNORM_DB_URL=url, TERMNORM_AUTH="off")
    from benchmarks.large_vocab import vocabulary_of
    from db import services
    from db.serving import build_engine

    services.init_db(url)
    with services.session_scope(url) as s:
        if fresh:
            t0 = time.perf_counter()
            vid = services.load_vocabulary(s, vocabulary_of(args.names), "large")
            services.create_batch(s, "one", vid, ["右侧甲状腺肿瘤切除术"])
            print(f"{args.names:,} names loaded into {url} in {time.perf_counter() - t0:.0f} s", flush=True)
        vid = services.vocabulary_id(s, "large")
    t0 = time.perf_counter()
    engine = build_engine(url, vid)  # writes the index cache the app then loads (or loads it)
    print(f"engine built in {time.perf_counter() - t0:.0f} s", flush=True)
    from app_pages._ui import SEARCH_LIMIT

    plan = []
    for q in queries(args.queries):
        top = [c.term for c in engine.search_vocabulary(q, SEARCH_LIMIT)[:3]]
        before = [c.term for c in engine.search_vocabulary(q[:-1], SEARCH_LIMIT)[:3]]
        if len(top) == 3 and top != before:
            plan.append((q, top))
    del engine
    configs = [("termnorm", {}, ()),  # as shipped: every keystroke searches, no collection after each run
               ("streamlit defaults", {"TERMNORM_SEARCH_PAUSE_MS": "250"}, ("--runner.postScriptGC", "true"))]
    result = {"command": "python3 " + " ".join(sys.argv), "names": args.names, "delay_ms": args.delay,
              "target_p95_ms": 150, "configs": []}
    for name, env, options in configs:
        rows = type_queries(args, work, plan, env, options)
        lat = [r["ms"] for r in rows if r["ms"] is not None]
        got = {"config": name, "env": env, "streamlit_options": list(options), "queries": len(rows),
               "timed_out": len(rows) - len(lat),
               "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat else None,
               "p95_ms": round(float(np.percentile(lat, 95)), 1) if lat else None,
               "max_ms": max(lat) if lat else None, "rows": rows}
        print(json.dumps({k: v for k, v in got.items() if k != "rows"}, ensure_ascii=False), flush=True)
        result["configs"].append(got)
    from benchmarks._results import write_json

    write_json(args.out, result)


def type_queries(args, work: Path, plan, env: dict, options) -> list[dict]:
    """Start the app with ``env`` and Streamlit ``options``, type each planned query, time it."""
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM, CHROMIUM_ARGS, free_port, health_url, start_streamlit, stop, wait_http

    port = free_port()
    with open(work / "app.log", "wb") as log:
        proc = start_streamlit(port, {**os.environ, **env}, *options, stdout=log, stderr=log)
    rows = []
    try:
        wait_http(health_url(port), 120, proc)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(300_000)
            t0 = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/")
            box = page.get_by_label("Search the vocabulary")
            box.wait_for()
            print(f"coding page with its search box in {time.perf_counter() - t0:.0f} s", flush=True)
            page.evaluate("window.addEventListener('input', () => { window.__tnKey = performance.now(); }, true)")
            for q, top in plan:
                box.fill("")
                page.wait_for_timeout(800)
                if args.pause_before_last:  # all but the last character, a pause, then the last one
                    box.press_sequentially(q[:-1], delay=args.delay)
                    page.wait_for_timeout(args.pause_before_last)
                    q_last = q[-1]
                else:
                    q_last = q
                page.evaluate(WATCH, [top])
                box.press_sequentially(q_last, delay=args.delay)
                try:
                    page.wait_for_function("window.__tnFound !== undefined", timeout=10_000)
                except Exception:  # the expected results never came: counted as timed out
                    pass
                got = page.evaluate("[window.__tnKey, window.__tnFound]")
                rows.append({"query": q, "top3": top, "ms": None if got[1] is None else round(got[1] - got[0], 1)})
                print(rows[-1], flush=True)
            browser.close()
    finally:
        stop(proc)
    return rows


if __name__ == "__main__":
    main()
