"""The embedded demo: vocabularies, labelled mentions and abbreviations under ``assets/demo``, and the
rankers fitted on public data of each demo domain (:data:`PRETRAINED`, served cold-start)."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Sequence

from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary



def app_root() -> Path:
    """The folder holding ``app.py``, ``app_pages/`` and ``assets/``: the repository (a checkout, an editable
    install), else the installed package ``termnorm_app`` (a non-editable install maps the repository root to
    it: pyproject.toml)."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "assets").is_dir() else here / "termnorm_app"


ASSETS = app_root() / "assets" / "demo"
#: Rankers fitted on public data of each demo domain (``termnorm train lexical --export-ranker``):
#: procedures on Yidu-N7K train, diagnoses on CHIP-CDN train. Only model trees, no text.
PRETRAINED = {"procedures": ASSETS.parent / "models" / "procedures_ranker.joblib",
              "diagnoses": ASSETS.parent / "models" / "diagnoses_ranker.joblib"}
#: The same domains' rankers fitted with history features (``--cold-start --history-mix``): they weigh the coders'
#: history, so a team's decisions steer similar mentions before any retraining (db.serving.shipped_ranker).
HISTORY_RANKERS = {"procedures": ASSETS.parent / "models" / "procedures_history.joblib",
                   "diagnoses": ASSETS.parent / "models" / "diagnoses_history.joblib"}
#: Coded mentions from which a vocabulary is served :data:`HISTORY_RANKERS`: the first history size at which the
#: sign test favours them on both Yidu-N7K val and CHIP-CDN dev (benchmarks/cold_history.py); with 100 on Yidu-N7K
#: only, with none on neither, and they miss the second procedure of the demo's ERCP+EST (docs/benchmarks.md).
HISTORY_FROM = 300
#: Abbreviations of common procedures and diagnoses written for the demo vocabularies (vocabulary search).
DEMO_ABBREVIATIONS = ASSETS / "abbreviations.json"
_HAN = re.compile("[\u4e00-\u9fff]")  # a Chinese character: the built-in abbreviations expand to Chinese names


#: Code shapes of each cold-start ranker's domain: ICD-9-CM-3 procedure codes (``06.4x00``, ``51.23``,
#: ``00.0200x001``) and ICD-10
#: diagnosis codes (``E11.901``, ``C56xx02``). A vocabulary is given a domain's ranker when most of its codes
#: have that shape (Chinese vocabularies only: the rankers learnt Chinese surface differences).
DOMAIN_CODES = {"procedures": re.compile(r"^\d{2}(\.\d[\dx]*)?$"),
                "diagnoses": re.compile(r"^[A-Z]\d{2}([.x]|$)")}


def cold_start_domain(vocab: Vocabulary, sample: int = 500) -> str | None:
    """The :data:`PRETRAINED` domain whose code shape most of the vocabulary's codes have (None: neither).

    Served before any retraining, the cold-start ranker lifts exact-set accuracy without a coded history
    from recall order 0.458 to 0.772 on the first 400 Yidu-N7K val mentions and from 0.148 to 0.295 on
    the first 400 CHIP-CDN dev mentions (measured while writing this; see the learning-curve benchmark).
    """
    if vocab.name.startswith("demo-") and vocab.name.removeprefix("demo-") in PRETRAINED:
        return vocab.name.removeprefix("demo-")
    if vocab.language != "zh":
        return None
    codes = [c for n in vocab.names[:: max(1, len(vocab.names) // sample)] for c in vocab.codes.get(n, [])[:1]]
    if not codes:
        return None
    share = {d: sum(bool(p.match(c)) for c in codes) / len(codes) for d, p in DOMAIN_CODES.items()}
    best = max(share, key=share.get)
    return best if share[best] >= 0.8 else None


def demo_vocabulary(which: str = "procedures") -> Vocabulary:
    v = Vocabulary(name=f"demo-{which}", source=str(ASSETS / f"{which}.csv"))
    with open(ASSETS / f"{which}.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            syn = [s for s in (row.get("synonyms") or "").split("|") if s.strip()]
            v.add_term(row["name"], [row["code"]], syn)
    return v


def demo_abbreviations(names: Sequence[str] | None = None) -> dict[str, str]:
    """The built-in list of common Chinese clinical abbreviations (:data:`DEMO_ABBREVIATIONS`: LC, TURP, TACE…);
    given a vocabulary's ``names``, {} unless most of them are Chinese (the demos', Yidu-N7K's, a hospital's own:
    a team test typed LC on Yidu-N7K and found nothing), so callers need not check."""
    sample = list(names[:2000]) if names is not None else []
    if names is not None and not 2 * sum(bool(_HAN.search(n)) for n in sample) >= len(sample) > 0:
        return {}
    from termnorm.loaders import load_keywords

    return load_keywords(ASSETS)["abbreviations"]


def demo_mentions(which: str | None = None) -> list[LabelledMention]:
    out = []
    with open(ASSETS / "mentions.csv", encoding="utf-8") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            if which and row.get("vocabulary") != which:
                continue
            out.append(LabelledMention(row["mention"], [t for t in row["terms"].split("##") if t], i))
    return out
