"""Load the real vocabularies and mention sets of a data folder (such as ``../shared/data``) into the app's database.

Each known vocabulary found in the folder becomes a vocabulary of the app and
each labelled set a batch in it (gold answers kept for evaluation, never shown
to coders). The coded training sets become the engine's history: they are
stored as batches whose mentions are already coded (accepted by the
``import`` user), so the sieve and history recall use them from the first
query.
"""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

# (vocabulary name, vocabulary file, [(batch name, labelled file, already coded?)])
KNOWN = [
    ("ICD-9-2017 协和临床版 (Yidu-N7K)", "yidu-n7k/code.txt",
     [("Yidu-N7K val", "yidu-n7k/val.xlsx", False), ("Yidu-N7K train (coded)", "yidu-n7k/train.xlsx", True)]),
    ("ICD-10 北京临床版 v601 (CHIP-CDN)", "chip-cdn/icd10_beijing_clinical_v601.xlsx",
     [("CHIP-CDN dev", "chip-cdn/dev.json", False), ("CHIP-CDN train (coded)", "chip-cdn/train.json", True)]),
    ("ICD-9-CM-3 医保版 v2.0", "icd9cm3/icd9cm3_yibao_v2_tree.json", []),
]


def load_folder(folder, db_url: str | None = None, limit: int | None = None, progress: bool = True) -> int:
    from db import services
    from termnorm.io import load_labelled, load_vocabulary

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    services.init_db(db_url)
    found = [(n, folder / v, b) for n, v, b in KNOWN if (folder / v).exists()]
    if not found:
        print(f"{folder}: none of the known vocabularies found ({', '.join(v for _, v, _ in KNOWN)})")
        return 1
    for name, vpath, sets in tqdm(found, desc="vocabularies", disable=not progress):
        vocab = load_vocabulary(vpath, name=name)
        with services.session_scope(db_url) as s:
            vid = services.load_vocabulary(s, vocab, name)
            services.ensure_user(s, "import", role="admin")
        print(f"{name}: {len(vocab)} terms (vocabulary id {vid})")
        for bname, lpath, coded in sets:
            lpath = folder / lpath
            if not lpath.exists():
                continue
            ls = load_labelled(lpath, vocab)
            mentions = ls.mentions[:limit] if limit else ls.mentions
            with services.session_scope(db_url) as s:
                existing = {b["name"] for b in services.batches(s, vid)}
                if bname in existing:
                    print(f"  {bname}: already loaded")
                    continue
                bid = services.create_batch(s, bname, vid, mentions, username="import", source_file=str(lpath))
            if coded:
                with services.session_scope(db_url) as s:
                    ids = [m["id"] for m in services.mentions(s, bid)]
                for mid, m in tqdm(list(zip(ids, mentions)), desc=f"  coding {bname}", disable=not progress):
                    terms = [t for t in m.terms if t in vocab]
                    if not terms:
                        continue
                    with services.session_scope(db_url) as s:
                        services.record_decision(s, mid, "import", "correct", terms, comment="imported gold")
            print(f"  {bname}: {len(mentions)} mentions"
                  + (f", {len(ls.missing)} gold names not in the vocabulary" if ls.missing else ""))
    return 0
