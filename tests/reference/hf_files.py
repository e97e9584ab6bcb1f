"""The files of a Hugging Face checkpoint, written byte by byte for make_hf_checkpoint.py
(NumPy only): *.safetensors (u64 header length, JSON header, row-major data), sharded with
model.safetensors.index.json, config.json, tokenizer.json / tokenizer_config.json (a byte-level
BPE with a chat template) and a SentencePiece tokenizer.model (protobuf written by hand)."""

import json
import os
import struct

import numpy as np

import gguf_np as G


def tensor_bytes(x, dtype):
    if dtype in ("U8", "F8_E4M3"):  # raw bytes (MXFP4 blocks and scales, FP8 codes)
        return np.ascontiguousarray(x, dtype=np.uint8).tobytes()
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "BF16":
        return G.f32_to_bf16_bits(x).astype("<u2").tobytes()
    return x.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, numpy array) or (name, numpy array, dtype) in file order, written
    as their own dtype or else `dtype`."""
    header, blobs, off = {}, [], 0
    for t in tensors:
        name, x, dt = t if len(t) == 3 else (t[0], t[1], dtype)
        raw = tensor_bytes(x, dt)
        header[name] = {"dtype": dt, "shape": list(x.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)  # the data section starts 8-aligned, as the library does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_checkpoint(d, config, tensors, dtype="F32", shards=1, tokenizer=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)
    else:
        weight_map = {}
        per = (len(tensors) + shards - 1) // shards
        for s in range(shards):
            name = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
            part = tensors[s * per:(s + 1) * per]
            write_safetensors(os.path.join(d, name), part, dtype)
            for t in part:
                weight_map[t[0]] = name
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)
    tok, tok_cfg = tokenizer
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, ensure_ascii=False)


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def make_tokenizer(n_vocab, merges_as_pairs, template_list=False):
    """A byte-level BPE tokenizer.json of n_vocab ids: printable ASCII, 'Ġ' (space) and three
    merged tokens from 0 up, ids in the middle left unassigned (llama.cpp pads them), and the
    last four ids added tokens (three special, one not)."""
    chars = ["\u0120"] + [chr(c) for c in range(33, 127)]
    merged = ["\u0120t", "he", "\u0120the"]
    base = chars + merged
    n_plain = min(len(base), n_vocab - 4 - 3)  # leave at least 3 ids unassigned
    vocab = {t: i for i, t in enumerate(base[:n_plain])}
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he")]
    merges = [m for m in merges if "".join(m) in vocab]
    added = [
        {"id": n_vocab - 4, "content": "<tool>", "special": False},
        {"id": n_vocab - 3, "content": "<|endoftext|>", "special": True},
        {"id": n_vocab - 2, "content": "<|im_start|>", "special": True},
        {"id": n_vocab - 1, "content": "<|im_end|>", "special": True},
    ]
    for a in added:
        a.update({"single_word": False, "lstrip": False, "rstrip": False, "normalized": False})
    tok = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "vocab": vocab,
                  "merges": [list(m) for m in merges] if merges_as_pairs
                  else [" ".join(m) for m in merges]},
    }
    tok_cfg = {"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"},
               "bos_token": None, "add_bos_token": False}
    if template_list:
        tok_cfg["chat_template"] = [{"name": "default", "template": CHAT_TEMPLATE},
                                    {"name": "tool_use", "template": "{{ tools }}"}]
    else:
        tok_cfg["chat_template"] = CHAT_TEMPLATE
    return tok, tok_cfg


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, wire, payload):
    return _varint(num << 3 | wire) + payload


def write_sentencepiece(path, pieces):
    """A SentencePiece tokenizer.model (protobuf ModelProto) of (piece, score, type) triples:
    field 1 repeated SentencePiece {1: piece, 2: score (float), 3: type}; a trainer_spec
    (field 2) is written too, which readers must skip."""
    out = bytearray()
    for text, score, ptype in pieces:
        raw = text.encode()
        msg = _field(1, 2, _varint(len(raw)) + raw) + _field(2, 5, struct.pack("<f", score))
        if ptype != 1:
            msg += _field(3, 0, _varint(ptype))
        out += _field(1, 2, _varint(len(msg)) + msg)
    spec = _field(3, 0, _varint(8000))  # trainer_spec.vocab_size, skipped by the converter
    out += _field(2, 2, _varint(len(spec)) + spec)
    with open(path, "wb") as f:
        f.write(bytes(out))


SPM_PIECES = ([("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
              + [(t, -float(i), 1) for i, t in enumerate(
                  ["\u2581the", "\u2581t", "he", "\u2581", "t", "h", "e", "a", "b", "c"])])
