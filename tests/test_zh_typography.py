"""The Chinese edition's typography and words: the mechanical rules of ``docs/glossary.md``.

What a native Chinese technical editor marked in the fourth pass (issue 36), held here so that it
does not come back. Checked in the Chinese prose of every translated chapter and exercise
(``book/*/zh/*.md``), outside code (backtick spans, fenced and indented blocks,
``$$`` formulas), and, for the words, in the Chinese messages of ``zerolab`` (``messages_zh.py``):

* no ASCII double quote in Chinese prose: “” (the full-width pair);
* no space between a number and ``%``, and none between Chinese text and “”;
* notebook cells are 单元格 (JupyterLab's Chinese); 单元 alone is a unit of gathers only;
* no 线路 ("on the wire"): 发送字节数, 发出, 通信量;
* 走廊 is PCIe's corridor to the warehouse only (chapter 5b's title is 走廊);
* no invented 细网络 (单网口集群);
* a sentence does not begin with a lowercase ``stage N`` (Stage N);
* an English gloss in brackets, 术语（English）, once in the whole course;
* sentences with two or more full-width colons (English sentence structure carried over) may not
  grow in number; the count below is what is left after the fourth pass, to be brought down.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_book  # noqa: E402

CODE = re.compile(r"```.*?```|`(?:[^`\n]|\n(?!\s*\n))*`|\$\$.*?\$\$|(?m:^(?:    |\t)[^\n]*$)", re.S)
HAN = r"[\u4e00-\u9fff]"
# sentences with two or more "："; none are left after the fourth pass (issue 36)
COLON_CHAINS_LEFT = 0


def _prose(text: str) -> str:
    return CODE.sub(" CODE ", text)


# the course's order: the chapters, then the exercises (book/notebooks, book/solutions)
CELLS = [(f"{src.parent.name}/{src.stem}", cid, _prose(text)) for src in build_book.sources()
         for cid, (_, text) in (build_book.translation(src) or {}).items()]


def test_every_translation_is_read():
    assert len({name for name, _, _ in CELLS}) == sum(1 for s in build_book.sources() if build_book.zh_source_of(s).exists())


def _hits(pattern: str, flags=0) -> list[str]:
    out = []
    for name, cid, prose in CELLS:
        for m in re.finditer(pattern, prose, flags):
            out.append(f"{cid}: ...{prose[max(0, m.start() - 20):m.end() + 20]}...".replace("\n", " "))
    return out


@pytest.mark.parametrize("what,pattern,fix", [
    ("an ASCII double quote in Chinese prose", r'"', "write “...”"),
    ("a space before %", r"\d %(?! assumed)", "write 35%, no space (the quoted English output '90 % assumed' aside)"),
    ("a space between Chinese and “”", rf"(?<={HAN}) “|” (?={HAN})", "no space around “” beside Chinese"),
    ("单元 for a notebook cell", r"(?:这个|下一个|上面的|下面的|检查|运行|代码|文字|markdown )单元(?!格)", "单元格"),
    ("线路 (on the wire)", r"线路", "发送字节数 / 发出 / 通信量"),
    ("细网络", r"细网络", "单网口集群"),
])
def test_mechanical_rule(what, pattern, fix):
    hits = _hits(pattern, re.M)
    assert not hits, f"{len(hits)} x {what} ({fix}):\n" + "\n".join(hits[:20])


def test_no_sentence_begins_with_lowercase_stage():
    bad = [f"{cid}: {s.strip()[:60]}" for _, cid, prose in CELLS for s in _sentences(prose)
           if re.match(r"[\s>#*|\-\d.]*(?:\*\*)?stage \d", s) and not re.match(r"\s*\|", s)]
    assert not bad, "a sentence begins with lowercase 'stage N' (write Stage N):\n" + "\n".join(bad[:20])


def test_the_corridor_is_pcie_only():
    hits = [h for h in _hits(r"走廊") if not re.search(r"仓库|5b|PCIe|卸载|堵死|很窄", h)]
    assert not hits, "走廊 is the corridor to the warehouse (PCIe) only:\n" + "\n".join(hits)


def test_an_english_gloss_once_per_course():
    # 术语（term）, **术语**（term） and 术语（中文，term）: each form of a gloss
    gloss = re.compile(rf"(?:(?<={HAN})|(?<={HAN}\*\*))（(?:{HAN}+[，；、] ?)?([A-Za-z][A-Za-z0-9 \-/\.']*)）")
    first, again = {}, []
    for name, cid, prose in CELLS:
        for m in gloss.finditer(prose):
            key = m.group(1).lower()
            if re.fullmatch(r"(?:fp|bf|int)\d+", key):      # 正确性（fp32）: a qualifier, not a gloss
                continue
            if key in first and first[key] != cid:
                again.append(f"{cid}: {m.group(0)} (glossed first in {first[key]})")
            first.setdefault(key, cid)
    assert not again, f"{len(again)} glosses repeated (gloss a term once per course):\n" + "\n".join(again[:30])


def _sentences(prose: str):
    # a sentence ends at 。！？ or at a paragraph, list item, table row or heading
    return re.split(r"[。！？]|\n\s*\n|\n(?=\s*(?:[-*|>#]|\d+\.))", prose)


def test_colon_chains_do_not_grow():
    chains = [f"{cid}: {s.strip()[:70]}" for _, cid, prose in CELLS for s in _sentences(prose) if s.count("：") >= 2]
    assert len(chains) <= COLON_CHAINS_LEFT, (
        f"{len(chains)} sentences with two or more '：' (at most {COLON_CHAINS_LEFT}): use 。, ——, 即 or 因为 "
        "as Chinese does:\n" + "\n".join(chains[:40]))
    if len(chains) < COLON_CHAINS_LEFT:
        print(f"\n{len(chains)} colon chains left: lower COLON_CHAINS_LEFT to {len(chains)}")


@pytest.mark.parametrize("word,fix", [("线路", "发送字节数 / 发出"), ("细网络", "单网口集群")])
def test_messages_words(word, fix):
    text = (ROOT / "zerolab" / "i18n" / "messages_zh.py").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if word in line]
    assert not lines, f"{word} in zerolab/i18n/messages_zh.py ({fix}):\n" + "\n".join(lines[:10])
