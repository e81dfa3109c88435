"""Small helpers the test modules share (pytest puts this folder on the path)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def need(path: Path) -> Path:
    """``path`` of the shared research data; a skip without it, a failure under CI (which must have it)."""
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: CI must have ../shared/data")
        pytest.skip(f"{path} not present")
    return path


def rerun(at):
    """Run a streamlit AppTest and fail on any exception the page raised."""
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def wait_for(pred, timeout: float = 60.0, poll: float = 0.05):
    """``pred()``'s first true value within ``timeout`` seconds (AssertionError otherwise)."""
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise AssertionError("condition not reached")


def demo_team(url: str, monkeypatch, users=(), n_mentions: int | None = 12, models_dir=None) -> tuple[int, int]:
    """The app as deployed, on ``url``: sign-in on, root (admin) and ``users`` ((name, role), password
    ``<name>-password``), the demo procedures vocabulary with a batch of its first ``n_mentions`` mentions
    (None: all). Returns (vocabulary id, batch id)."""
    from db import auth, services
    from termnorm.engine import demo_mentions, demo_vocabulary

    monkeypatch.setenv("TERMNORM_DB_URL", url)
    if models_dir is not None:
        monkeypatch.setenv("TERMNORM_MODELS", str(models_dir))
    monkeypatch.delenv("TERMNORM_AUTH", raising=False)  # sign-in on
    monkeypatch.setenv("TERMNORM_BCRYPT_ROUNDS", "4")
    services.init_db(url)
    with services.session_scope(url) as s:
        vid = services.load_vocabulary(s, demo_vocabulary("procedures"), "demo-procedures")
        texts = [m.text for m in demo_mentions("procedures")]
        bid = services.create_batch(s, "demo procedures", vid, texts[:n_mentions] if n_mentions else texts)
        auth.create_admin(s, "root", "root-password")
        for name, role in users:
            auth.create_user(s, "root", name, f"{name}-password", role)
    return vid, bid


def tiny_yidu(folder: Path) -> Path:
    """The demo procedures in Yidu-N7K's layout (code.txt, train.xlsx, val.xlsx): a set the real run_fold fits
    in seconds."""
    import pandas as pd

    demo = REPO / "assets" / "demo"
    vocab = pd.read_csv(demo / "procedures.csv", dtype=str)
    mentions = pd.read_csv(demo / "mentions.csv", dtype=str)
    mentions = mentions[mentions.vocabulary == "procedures"].rename(columns={"mention": "原始词", "terms": "标准词"})
    (folder / "yidu-n7k").mkdir(parents=True)
    (folder / "keywords").mkdir()  # none: the engine's built-in keywords
    (folder / "yidu-n7k" / "code.txt").write_text(
        "".join(f"{c}\t{n}\n" for c, n in zip(vocab.code, vocab.name)), encoding="utf-8")
    cut = len(mentions) * 3 // 4
    mentions[["原始词", "标准词"]][:cut].to_excel(folder / "yidu-n7k" / "train.xlsx", index=False)
    mentions[["原始词", "标准词"]][cut:].to_excel(folder / "yidu-n7k" / "val.xlsx", index=False)
    return folder
