"""Byte-level BPE (GPT-2 style) for lynx-moe's trained models: pre-tokenizer, encoder,
decoder, GPT-2 byte<->unicode alphabet. Pure Python.

Pre-tokenization is llama.cpp's "gpt-2" regex (tokenizer.ggml.pre = "gpt-2"):
  's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
Python's `re` has no \\p{..}, so the classes are spelled out from unicodedata:
  \\p{L}: general category L*;  \\p{N}: category N*;
  \\s: what PCRE2 matches with PCRE2_UCP (lynx-moe compiles with UTF|UCP): tab, LF, VT, FF,
      CR, U+0085, U+00A0, U+1680, U+180E, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
      U+3000, and every character of category Z* (PCRE2's HSPACE/VSPACE lists + ucp_Z).
  Python's own \\s differs (it includes U+001C..U+001F), hence the explicit class.

Encoding merges the lowest-rank adjacent pair first (ties: leftmost), as llama.cpp's
llm_tokenizer_bpe does. Token ids: 0..255 are the single bytes (id == byte value), then one
token per merge in rank order, then the special tokens.
"""
import json
import re
import sys
import unicodedata


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_UNI = bytes_to_unicode()
UNI_TO_BYTE = {v: k for k, v in BYTE_TO_UNI.items()}

_PCRE2_SPACE_EXTRA = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0xA0, 0x1680, 0x180E,
                      *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]


def _ranges(pred):
    out, start = [], None
    for cp in range(0x110000):
        if pred(cp):
            if start is None:
                start = cp
        elif start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def _class_body(ranges):
    parts = []
    for a, b in ranges:
        if 0xD800 <= a <= 0xDFFF and 0xD800 <= b <= 0xDFFF:
            continue
        ea, eb = re.escape(chr(a)), re.escape(chr(b))
        parts.append(ea if a == b else ea + "-" + eb)
    return "".join(parts)


_PATTERN = None


def gpt2_pattern():
    global _PATTERN
    if _PATTERN is None:
        cat = unicodedata.category
        spaces = set(_PCRE2_SPACE_EXTRA)
        L = _class_body(_ranges(lambda c: cat(chr(c))[0] == "L"))
        N = _class_body(_ranges(lambda c: cat(chr(c))[0] == "N"))
        S = _class_body(_ranges(lambda c: c in spaces or cat(chr(c))[0] == "Z"))
        pat = ("'s|'t|'re|'ve|'m|'ll|'d| ?[%s]+| ?[%s]+| ?[^%s%s%s]+|[%s]+(?![^%s])|[%s]+"
               % (L, N, S, L, N, S, S, S))
        _PATTERN = re.compile(pat)
    return _PATTERN


def pretokenize(text):
    return gpt2_pattern().findall(text)


class Tokenizer:
    def __init__(self, merges, specials):
        """merges: list of (id_a, id_b) in rank order; the merged token of rank r has id
        256 + r. specials: list of strings, ids after the merges."""
        self.merges = [tuple(m) for m in merges]
        self.ranks = {m: r for r, m in enumerate(self.merges)}
        self.token_bytes = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.token_bytes.append(self.token_bytes[a] + self.token_bytes[b])
        self.specials = list(specials)
        self.special_ids = {s: 256 + len(self.merges) + i for i, s in enumerate(self.specials)}
        self.n_vocab = 256 + len(self.merges) + len(self.specials)
        self._cache = {}

    # --- persistence -------------------------------------------------------------------
    def save(self, path):
        with open(path, "w") as f:
            json.dump({"format": "lynx-moe bpe v1", "pre": "gpt-2",
                       "merges": self.merges, "specials": self.specials}, f)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            d = json.load(f)
        return cls(d["merges"], d["specials"])

    # --- GGUF vocabulary ---------------------------------------------------------------
    def token_strings(self):
        out = ["".join(BYTE_TO_UNI[b] for b in tb) for tb in self.token_bytes]
        return out + self.specials

    def merge_strings(self):
        s = self.token_strings()
        return ["%s %s" % (s[a], s[b]) for a, b in self.merges]

    # --- encode / decode ---------------------------------------------------------------
    def encode_word(self, word):
        ids = self._cache.get(word)
        if ids is not None:
            return ids
        sym = list(word.encode("utf-8"))
        ranks = self.ranks
        while len(sym) > 1:
            best, best_i = None, -1
            for i in range(len(sym) - 1):
                r = ranks.get((sym[i], sym[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            # merge every occurrence of this pair, left to right (same as repeated
            # lowest-rank-leftmost merging, since one rank is one pair)
            a, b = self.merges[best]
            new_id = 256 + best
            out, i = [], 0
            while i < len(sym):
                if i < len(sym) - 1 and sym[i] == a and sym[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            sym = out
        if len(self._cache) < 1_000_000:
            self._cache[word] = sym
        return sym

    def encode(self, text):
        out = []
        for w in pretokenize(text):
            out.extend(self.encode_word(w))
        return out

    def decode_bytes(self, ids):
        tb = self.token_bytes
        return b"".join(tb[i] if i < len(tb) else b"" for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


if __name__ == "__main__":
    tok = Tokenizer.load(sys.argv[1])
    text = sys.stdin.read()
    print(" ".join(map(str, tok.encode(text))))
