"""Load the real vocabularies and mention sets of a data folder (such as ``../shared/data``) into the app's database.

Each known vocabulary found in the folder becomes a vocabulary of the app and
each labelled set a batch in it. Labelled mentions take their side of the
vocabulary's evaluation split as they are stored (db.learning): most are
training data, a held-out share measures every model. The coded training
sets are stored as batches whose mentions are already coded (decided by the
``import`` user), so the sieve and history recall use them from the first
query; a mention whose gold names are not all terms of the vocabulary is
decided as a rejection saying which names are missing, so no training mention
is left open in the coding queue. Everything in the folder that is not loaded
is named with the reason (:func:`load`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from db.accounts import LOADER_USER

# (vocabulary name, vocabulary file, [(batch name, labelled file, already coded?)]); a coded (train) file trains,
# the other (dev / val) is the held-out evaluation side: each set's official split (db.learning.assign_by_file)
KNOWN = [
    ("ICD-9-2017 协和临床版 (Yidu-N7K)", "yidu-n7k/code.txt",
     [("Yidu-N7K val", "yidu-n7k/val.xlsx", False), ("Yidu-N7K train (coded)", "yidu-n7k/train.xlsx", True)]),
    ("ICD-10 北京临床版 v601 (CHIP-CDN)", "chip-cdn/icd10_beijing_clinical_v601.xlsx",
     [("CHIP-CDN dev", "chip-cdn/dev.json", False), ("CHIP-CDN train (coded)", "chip-cdn/train.json", True)]),
    ("ICD-9-CM-3 医保版 v2.0", "icd9cm3/icd9cm3_yibao_v2_tree.json", []),
    ("MEDIC 2012-07-06 (NCBI disease)", "ncbi-disease/medic_06Jul2012.txt",
     [("NCBI disease dev", "ncbi-disease/NCBIdevelopset_corpus.txt", False),
      ("NCBI disease train (coded)", "ncbi-disease/NCBItrainset_corpus.txt", True)]),
]
#: Each set's pipeline settings for its fits (db.learning.pipeline_settings): the ones the README's accuracy
#: table measures (Yidu-N7K the compact recall profile; CHIP-CDN twice as deep, the ranker's best 50, the number
#: of terms chosen for micro-F1, its metric); the keyword lists where the folder has them (Chinese sets).
PIPELINES = {
    "yidu-n7k/code.txt": {"recall_profile": "compact", "keywords": True},
    "chip-cdn/icd10_beijing_clinical_v601.xlsx": {"recall_profile": "deep", "max_candidates": 50,
                                                  "output_rule_metric": "micro_f1", "keywords": True},
}
#: Files of the data folder that are not loaded, and why.
NOT_LOADED = {
    "chip-cdn/unlabeled.json": "mentions without labels (the official test set): nothing to train or measure on; "
                               "import it on the Import page as a batch to code if wanted",
    "keywords": "keyword lists and abbreviations: not terms or mentions; the Chinese vocabularies' fits read "
                "the keyword lists (pipeline settings) and their search the abbreviation list",
    "symptoms": "colloquial symptom synonyms: not a vocabulary with codes nor labelled mentions",
}
#: What the rejection of a coded mention whose gold names the vocabulary lacks says (with the names).
MISSING_COMMENT = "gold name not in this vocabulary: "


@dataclass
class LoadResult:
    """What :func:`load` did: vocabulary ids by name, those with labelled mentions, what it skipped and why."""

    code: int = 0
    vocabularies: dict[str, int] = field(default_factory=dict)
    labelled: list[int] = field(default_factory=list)  # vocabulary ids that received labelled mentions
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    rejected_missing: dict[str, int] = field(default_factory=dict)  # coded batch -> mentions decided as reject


def load(folder, db_url: str | None = None, limit: int | None = None, progress: bool = True) -> LoadResult:
    """Load every known vocabulary and labelled set found in ``folder`` (``limit``: mentions per set) and print
    what was loaded and what was skipped with the reason."""
    from db import services

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    services.init_db(db_url)
    res = LoadResult()
    found = [(n, folder / v, b) for n, v, b in KNOWN if (folder / v).exists()]
    if not found:
        print(f"{folder}: none of the known vocabularies found ({', '.join(v for _, v, _ in KNOWN)})")
        res.code = 1
        return res
    for name, vpath, sets in tqdm(found, desc="vocabularies", disable=not progress):
        _load_vocabulary(name, vpath, sets, folder, db_url, limit, progress, res)
    res.skipped += _not_loaded(folder)
    for path, why in res.skipped:
        print(f"skipped {path}: {why}")
    return res


def _load_vocabulary(name: str, vpath: Path, sets, folder: Path, db_url, limit, progress, res: LoadResult) -> None:
    from db import services
    from termnorm.loaders import load_labelled, load_vocabulary

    vocab = load_vocabulary(vpath, name=name)
    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, vocab, name)
        services.ensure_user(s, LOADER_USER, role="admin")
    res.vocabularies[name] = vid
    print(f"{name}: {len(vocab)} terms (vocabulary id {vid})")
    _set_pipeline(vpath.relative_to(folder).as_posix(), folder, vid, db_url)
    sides: dict[int, str] = {}
    for bname, lpath, coded in sets:
        lpath = folder / lpath
        if not lpath.exists():
            res.skipped.append((str(lpath.relative_to(folder)), "file not found"))
            continue
        ls = load_labelled(lpath, vocab)
        mentions = ls.mentions[:limit] if limit else ls.mentions
        with services.session_scope(db_url) as s:
            if bname in {b["name"] for b in services.batches(s, vid)}:
                print(f"  {bname}: already loaded")
                continue
            bid = services.create_batch(s, bname, vid, mentions, username=LOADER_USER, source_file=str(lpath))
        sides[bid] = "train" if coded else "eval"
        if any(m.terms for m in mentions) and vid not in res.labelled:
            res.labelled.append(vid)
        rejected = _decide_coded(db_url, bid, mentions, vocab, bname, progress) if coded else 0
        missing = sum(not all(t in vocab for t in m.terms) for m in mentions)
        print(f"  {bname}: {len(mentions)} mentions"
              + (f", {missing} with gold names not in the vocabulary" if missing else "")
              + (" (decided as rejections saying which: not left open)" if rejected else ""))
        if coded:
            res.rejected_missing[bname] = rejected
    if sides:
        from db import learning

        with services.session_scope(db_url) as s:
            split = learning.assign_by_file(s, vid, sides, LOADER_USER)
        print(f"  evaluation split: the official one of the files, {split['train']} training and {split['eval']} "
              f"held-out labelled mentions")


def _set_pipeline(vfile: str, folder: Path, vocabulary_id: int, db_url) -> None:
    """The set's pipeline settings and, for the Chinese sets, the folder's abbreviation list (search and the
    engine's expansion of PCI, ESWL ...: db.abbreviations)."""
    import json

    from db import abbreviations, learning, services

    wanted = dict(PIPELINES.get(vfile, {}))
    keywords = wanted.pop("keywords", False) and (folder / "keywords").is_dir()
    if keywords:
        wanted["keyword_dir"] = str((folder / "keywords").resolve())
    if wanted:
        with services.session_scope(db_url) as s:
            learning.set_pipeline_settings(s, vocabulary_id, wanted, LOADER_USER)
    listed = folder / "keywords" / "abbreviations.json"
    if keywords and listed.exists():
        pairs = json.loads(listed.read_text(encoding="utf-8")).items()
        with services.session_scope(db_url) as s:
            n = abbreviations.import_list(s, vocabulary_id, pairs, LOADER_USER)
        print(f"  abbreviations: {n} new from {listed.relative_to(folder)}")


def _decide_coded(db_url, batch_id: int, mentions, vocab, bname: str, progress: bool) -> int:
    """Record the import user's decision on each mention of a coded batch: ``correct`` with its gold terms, or
    -- when a gold name is not a term of the vocabulary -- ``reject`` with a comment naming the missing
    names (coding only the known part would store a wrong, partial code as right). Returns the rejections."""
    from db import services

    with services.session_scope(db_url) as s:
        ids = [m["id"] for m in services.mentions(s, batch_id)]
    rejected = 0
    for mid, m in tqdm(list(zip(ids, mentions)), desc=f"  coding {bname}", disable=not progress):
        missing = [t for t in m.terms if t not in vocab]
        with services.session_scope(db_url) as s:
            if missing or not m.terms:
                services.record_decision(s, mid, LOADER_USER, "reject",
                                         comment=MISSING_COMMENT + ", ".join(missing or ["(no gold name)"]))
                rejected += 1
            else:
                services.record_decision(s, mid, LOADER_USER, "correct", list(m.terms), comment="imported gold")
    return rejected


def _not_loaded(folder: Path) -> list[tuple[str, str]]:
    """Entries of the data folder no known set uses, with the reason."""
    used = {Path(v).parts[0] for _, v, _ in KNOWN} | {Path(f).parts[0] for _, _, b in KNOWN for _, f, _ in b}
    used_files = {v for _, v, _ in KNOWN} | {f for _, _, b in KNOWN for _, f, _ in b}
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.name.startswith(".") or p.name.lower().startswith(("readme", "license")):
            continue
        top = rel.split("/")[0]
        if p.is_dir():
            if top not in used and rel == top:
                out.append((rel, NOT_LOADED.get(rel, "no loader for this folder")))
            continue
        if top in used and rel not in used_files:
            out.append((rel, NOT_LOADED.get(rel, "not a known vocabulary or labelled set")))
    return out
