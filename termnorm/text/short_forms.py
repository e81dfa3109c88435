"""Chinese clinical short forms (简称) spelled out: 上感 → 上呼吸道感染, 晚孕 → 晚期妊娠, 房颤 → 心房颤动.

Clinical notes write diagnoses short: 晚孕(上感), 冠心病, 慢阻肺急性加重. Vocabulary names spell them out, so
recall by characters misses them (晚孕(上感) was suggested 心境[情感]障碍 on day one). The abbreviation lists
(``abbreviations.json``, :class:`termnorm.text.normalize.Abbreviations`) hold Latin short forms only (copd, ca).
This built-in table is the other half: well-known Chinese short forms and the full form a vocabulary names.
The recall (termnorm.recall.union) recalls a mention holding one in its spelled-out form too, as it does
the abbreviation lists' (keys ``<strategy>_abbr``).

Chinese has no word boundaries, so a short form inside a longer word is left alone: an occurrence that a
vocabulary name holding the short form covers (房颤 in 心房颤动, 房早 in 乳房早发育), one already followed by
its full form's rest (脑梗死), and any in a text that already spells the full form out (上呼吸道感染(上感)).
A character after the short form that the full form ends with is not said twice (心衰竭 → 心力衰竭).
"""

from __future__ import annotations

import re
from typing import Iterable

from termnorm.text.normalize import has_cjk, normalize

#: recall reads the short forms (termnorm.recall.union); off until cross-validated (benchmarks/cv.py row
#: ``short_forms``)
ENABLED = False

#: short form, full form; one pair a line. Well-known forms (textbook and coding-manual usage), none taken
#: from an evaluation set's errors.
TABLE = """
上感 上呼吸道感染
早孕 早期妊娠
中孕 中期妊娠
晚孕 晚期妊娠
宫外孕 异位妊娠
妊高征 妊娠期高血压
冠心病 冠状动脉粥样硬化性心脏病
肺心病 肺源性心脏病
风心病 风湿性心脏病
先心病 先天性心脏病
高心病 高血压性心脏病
心梗 心肌梗死
脑梗 脑梗死
脑梗塞 脑梗死
梗塞 梗死
腔梗 腔隙性脑梗死
心衰 心力衰竭
肾衰 肾功能衰竭
呼衰 呼吸衰竭
房颤 心房颤动
房扑 心房扑动
室颤 心室颤动
室速 室性心动过速
室上速 室上性心动过速
室早 室性期前收缩
甲亢 甲状腺功能亢进症
甲减 甲状腺功能减退症
甲旁亢 甲状旁腺功能亢进症
慢阻肺 慢性阻塞性肺疾病
慢支 慢性支气管炎
支扩 支气管扩张
甲肝 甲型病毒性肝炎
乙肝 乙型病毒性肝炎
丙肝 丙型病毒性肝炎
戊肝 戊型病毒性肝炎
溃结 溃疡性结肠炎
类风关 类风湿性关节炎
强脊 强直性脊柱炎
腰突 腰椎间盘突出
尿感 尿路感染
泌感 泌尿系感染
粒缺 粒细胞缺乏
再障 再生障碍性贫血
缺铁贫 缺铁性贫血
糖肾 糖尿病肾病
糖足 糖尿病足
肾综 肾病综合征
脑瘫 脑性瘫痪
老年痴呆 阿尔茨海默病
乳癌 乳腺恶性肿瘤
"""


def table() -> dict[str, str]:
    """The built-in pairs, normalized: ``{short form: full form}``."""
    out = {}
    for line in TABLE.strip().splitlines():
        short, full = line.split()
        out[normalize(short)] = normalize(full)
    return out


class ShortForms:
    """The short forms of ``pairs`` (default :func:`table`; Chinese keys only), guarded by the vocabulary's
    ``names`` (the module docstring)."""

    def __init__(self, names: Iterable[str], pairs: dict[str, str] | None = None):
        self.table = {k: v for k, v in (table() if pairs is None else pairs).items() if has_cjk(k) and k != v}
        self._re = re.compile("|".join(map(re.escape, sorted(self.table, key=len, reverse=True)))) \
            if self.table else None
        # where a name holds a short form: (offset of the short form in the name, the name)
        self._inside: dict[str, list[tuple[int, str]]] = {}
        if self._re is not None:
            for name in {normalize(n) for n in names}:
                for m in self._re.finditer(name):
                    self._inside.setdefault(m.group(0), []).append((m.start(), name))

    def found(self, text: str) -> list[tuple[str, str]]:
        """The (short form, full form) pairs :meth:`expand` spells out in ``text`` (normalized), in order."""
        return [(m.group(0), self.table[m.group(0)]) for m in self._hits(text)]

    def expand(self, text: str) -> str:
        """``text`` (normalized) with its short forms spelled out; ``text`` itself when it holds none.

        >>> ShortForms(["心房颤动"]).expand("晚孕(上感)")
        '晚期妊娠(上呼吸道感染)'
        >>> s = ShortForms(["心房颤动", "脑梗死"])
        >>> s.expand("阵发性房颤"), s.expand("心房颤动"), s.expand("多发脑梗死"), s.expand("慢性心衰竭")
        ('阵发性心房颤动', '心房颤动', '多发脑梗死', '慢性心力衰竭')
        """
        out, last = [], 0
        for m in self._hits(text):
            full = self.table[m.group(0)]
            end = m.end()
            if end < len(text) and full.endswith(text[end]):  # 心衰竭: the 竭 is the full form's
                end += 1
            out += [text[last:m.start()], full]
            last = end
        return "".join(out) + text[last:] if out else text

    def _hits(self, text: str) -> list[re.Match]:
        if self._re is None or not has_cjk(text):
            return []
        return [m for m in self._re.finditer(text) if self._stands_alone(text, m)]

    def _stands_alone(self, text: str, m: re.Match) -> bool:
        short, a = m.group(0), m.start()
        full = self.table[short]
        if full in text:  # spelled out already: 上呼吸道感染(上感), 多发脑梗死
            return False
        return not any(a >= off and text.startswith(name, a - off) for off, name in self._inside.get(short, ()))
