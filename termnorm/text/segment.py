"""Word segmentation (PROVISIONAL: the text-handling work replaces this, keeping the interface)."""

import jieba


class Segmenter:
    """jieba with a user dictionary built from vocabulary names / keywords."""

    def __init__(self, words=()):
        self._tk = jieba.Tokenizer()
        for w in words:
            self._tk.add_word(w)

    def cut(self, text: str) -> list[str]:
        return [w for w in self._tk.lcut(text) if w.strip()]
