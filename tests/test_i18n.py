"""zerolab speaks English by default and Chinese in the Chinese edition (``zerolab/i18n/language.py``).

* where the language comes from: a notebook's kernel (``$ZEROLAB_LANG``, the notebook's folder:
  ``notebooks/zh`` and the like; never the locale) and the command line (``--lang``,
  ``$ZEROLAB_LANG``, then the locale);
* the catalogue (``zerolab/i18n/messages_zh.py``): every template a translated module shows is there, and
  its Chinese uses only the English's fields;
* ``zerolab progress``, ``zerolab report --preflight`` and ``zerolab explain`` in Chinese, English unchanged;
  the engine's warnings (a key with no effect, hpZ's groups, qgZ's scale) in the edition's language;
* the engine's own errors around the training step (a checkpoint of another model, deepspeed.initialize
  misused, a collective's sizes, the topology, the models) and the commands' (zerolab simulate, train,
  consolidate) in the edition's language, English word for word as before;
* every exercise's check (0, 1, 2, 3, 3b, 3c, 4, 5, 6, 7, 8, 8c, 9, 13, 14) fails in the edition's language,
  with its hint, also where the message is written on a rank, and in English exactly as before.
"""
from __future__ import annotations

import ast
import os
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zerolab import i18n
from zerolab.course import progress
from zerolab.tools import report
from zerolab.course.checks import ExerciseCheckFailed
from zerolab.cli import main as cli
from zerolab.i18n.messages_zh import ZH

from scaler_answers import update_scale

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "zerolab"
CJK = __import__("re").compile(r"[\u4e00-\u9fff]")

def _sections() -> dict[str, str]:
    """Module (its path under zerolab/) -> the catalogue section its ``T`` speaks, found in the code:
    ``T = catalogue("x")`` (or ``i18n.catalogue``), or ``T`` imported from a module that has one."""
    own, borrowed = {}, {}
    for path in sorted(PKG.rglob("*.py")):
        name = path.relative_to(PKG).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["T"] \
                    and isinstance(node.value, ast.Call) and node.value.args \
                    and getattr(node.value.func, "id", getattr(node.value.func, "attr", None)) == "catalogue":
                own[name] = node.value.args[0].value
            elif isinstance(node, ast.ImportFrom) and node.level and any(a.name == "T" and not a.asname
                                                                         for a in node.names):
                base = Path(name).parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base.joinpath(*(node.module or "").split("."))
                borrowed[name] = (target.as_posix() + ".py").removeprefix("./")
    return {**{name: own[src] for name, src in borrowed.items() if src in own}, **own}


TRANSLATED = _sections()


@pytest.fixture(autouse=True)
def _no_language_set(monkeypatch):
    for var in ("ZEROLAB_LANG", "JPY_SESSION_NAME", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(var, raising=False)
    i18n.set_lang(None)
    yield
    i18n.set_lang(None)


# -- where the language comes from ------------------------------------------------------------------

def test_normalize():
    assert [i18n.normalize(v) for v in ("zh", "zh_CN.UTF-8", "zh-Hans", "ZH_tw", "chinese")] == ["zh"] * 5
    assert [i18n.normalize(v) for v in ("en", "en_US.UTF-8", "C", "C.UTF-8", "POSIX")] == ["en"] * 5
    assert [i18n.normalize(v) for v in ("", None, "fr_FR.UTF-8")] == [None, None, None]


def test_a_kernel_speaks_the_language_of_its_notebooks_folder_never_the_locale(monkeypatch, tmp_path):
    for folder in ("notebooks", "exercises", "solutions"):
        (tmp_path / folder / "zh").mkdir(parents=True)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")                  # a Chinese machine, an English chapter
    monkeypatch.chdir(tmp_path / "notebooks")
    assert i18n.kernel_lang() == "en"
    for folder in ("notebooks", "exercises", "solutions"):
        monkeypatch.chdir(tmp_path / folder / "zh")
        assert i18n.kernel_lang() == "zh", folder
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "exercises" / "zh" / "06_bucket_params.ipynb"))
    assert i18n.kernel_lang() == "zh"                           # Jupyter names the notebook: that decides
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "exercises" / "06_bucket_params.ipynb"))
    monkeypatch.chdir(tmp_path / "notebooks" / "zh")
    assert i18n.kernel_lang() == "en"
    monkeypatch.setenv("ZEROLAB_LANG", "zh")                    # the variable overrides both
    assert i18n.kernel_lang() == "zh"
    assert i18n.edition_of(tmp_path / "zh") == "en"             # a folder called zh elsewhere is not an edition


def test_the_command_line_follows_lang_then_the_variable_then_the_locale(monkeypatch):
    assert i18n.cli_lang() == "en"
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert i18n.cli_lang() == "zh"
    monkeypatch.setenv("LC_ALL", "C")                           # POSIX: LC_ALL before LANG
    assert i18n.cli_lang() == "en"
    monkeypatch.setenv("ZEROLAB_LANG", "zh")
    assert i18n.cli_lang() == "zh"
    assert i18n.cli_lang("en") == "en"
    with pytest.raises(ValueError, match="zerolab speaks en, zh"):
        i18n.set_lang("fr")


def test_fill_breaks_chinese_by_columns_and_keeps_words_whole():
    text = "提示：" + "每个 rank 只发出 (N-1)/N，" * 12
    lines = i18n.fill(text, 60, "  ", "        ").splitlines()
    assert len(lines) > 2 and all(i18n.width(line) <= 61 for line in lines), lines
    assert all(not line.strip().startswith("，") for line in lines)
    assert "(N-1)/N" in "".join(lines)


# -- the catalogue ----------------------------------------------------------------------------------

def _templates(path: Path) -> list[str]:
    """The templates a module shows, read from its code: the literal first arguments of ``T(...)``,
    ``T.text(...)``, ``T.mark(...)`` (a template a table holds) and ``F(...)`` (a figure's text), both
    branches of a literal ``a if c else b`` there, and the ``other`` form of ``T.plural(n, one, other)``
    (Chinese has one form)."""
    def literals(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.IfExp):
            return literals(node.body) + literals(node.orelse)
        return []

    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        on_t = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "T"
        if (isinstance(f, ast.Name) and f.id in ("T", "F")) or (on_t and f.attr in ("text", "mark")):
            out += literals(node.args[0]) if node.args else []
        elif on_t and f.attr == "plural" and len(node.args) >= 3:
            out += literals(node.args[2])
        elif (isinstance(f, ast.Name) and f.id == "join_and") or (on_t and f.attr == "join_and"):
            out += [" and ", ", "]                       # i18n.join_and's joints, in the caller's section
    return out


def _fields(template: str) -> set[str]:
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("module", sorted(TRANSLATED))
def test_every_template_a_translated_module_shows_is_in_the_catalogue(module):
    section = TRANSLATED[module]
    templates = _templates(PKG / module)
    assert templates, f"zerolab/{module} shows no message through T(...)"
    missing = [t for t in templates if t not in ZH.get(section, {})]
    assert not missing, f"zerolab/i18n/messages_zh.py, section {section!r}, lacks:\n" + "\n".join(map(repr, missing))


def test_every_module_that_shows_a_template_has_a_section():
    """A module calling ``T("...")`` whose ``T`` is no catalogue's (or imported from none) would speak
    English in the Chinese edition and escape the test above."""
    orphans = sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
                     if p.relative_to(PKG).as_posix() not in TRANSLATED and _templates(p)
                     and p.parent.resolve() != Path(i18n.__file__).parent.resolve())     # the machinery itself
    assert not orphans, f"T(...) with no catalogue section found: {orphans}"
    assert {f"course/checks/{p.name}" for p in (PKG / "course" / "checks").glob("*.py")} <= set(TRANSLATED)


def test_the_sections_and_templates_are_found_in_the_code(tmp_path):
    """The two readings above on a module written here: a section through an import, a table's mark,
    a plural's one form, a conditional template, a list in a sentence."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "common.py").write_text('T = catalogue("demo")\n', encoding="utf-8")
    (tmp_path / "pkg" / "user.py").write_text(
        "from .common import T\nROWS = (T.mark('a row'),)\n"
        "def f(n, ok):\n    return T.plural(n, '{n} try', '{n} tries') + T('yes' if ok else 'no')"
        " + T.join_and(ROWS)\n", encoding="utf-8")
    global PKG
    saved, PKG = PKG, tmp_path
    try:
        assert _sections() == {"pkg/common.py": "demo", "pkg/user.py": "demo"}
    finally:
        PKG = saved
    assert sorted(_templates(tmp_path / "pkg" / "user.py")) == sorted(
        ["a row", "{n} tries", "yes", "no", " and ", ", "])


def _only_chinese_punctuation(template: str) -> bool:
    """'{where}：{what}', '  - {path} = {value}：{why}': fields joined by marks, at least one of them
    full-width, and no word: nothing to translate but the marks."""
    literal = "".join(text for text, _, _, _ in string.Formatter().parse(template)).strip()
    full_width = [ch for ch in literal if "\u3000" <= ch <= "\u303f" or "\uff00" <= ch <= "\uffef"]
    return bool(full_width) and not re.search(r"[A-Za-z0-9]", literal)


def test_every_chinese_template_uses_only_its_englishs_fields_and_is_chinese():
    bad = []
    for section, table in ZH.items():
        for en, zh in table.items():
            if not _fields(zh) <= _fields(en):
                bad.append(f"{section}: {en[:50]!r}: the Chinese uses {_fields(zh) - _fields(en)}")
            if not CJK.search(zh) and en not in ("READY",) and not _only_chinese_punctuation(zh):
                bad.append(f"{section}: {en[:50]!r}: no Chinese in {zh[:50]!r}")
    assert not bad, "\n".join(bad)


def test_a_template_with_no_chinese_stays_english():
    t = i18n.Catalogue({"one": "一"})
    with i18n.using("zh"):
        assert (t("one"), t("two {n}", n=2)) == ("一", "two 2")
    assert t("one") == "one"


# -- zerolab progress, zerolab report --preflight ---------------------------------------------------

def test_zerolab_progress_in_chinese_and_in_english(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("ZEROLAB_PROGRESS", str(tmp_path / "p.json"))
    progress.record("ch06.check_bucket_params", False, "small parameters: sizes [30, 20]")
    progress.record("ch14.check_tokens_to_hide", True, "ok")
    assert cli(["progress", "--lang", "zh"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("已记录的练习检查") and out[-1] == f"{len(progress.EXERCISES)} 个练习已完成 1 个"
    assert any("尝试过" in line and "练习 6" in line and "尚未通过（运行 1 次）" in line for line in out), out
    assert any("已完成" in line and "练习 14a" in line for line in out), out
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert cli(["progress"]) == 0 and "练习 6" in capsys.readouterr().out
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert cli(["progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"1 of {len(progress.EXERCISES)} exercises done" and not any(CJK.search(x) for x in out)
    assert i18n.lang() == "en"


def test_preflight_in_chinese(monkeypatch, capsys):
    """Every check's line in Chinese (the checks themselves faked: the real one runs in test_report)."""
    def fake(name, ok):
        return lambda *a, **k: report.Check(name, ok, report.T("free memory unknown on this platform"),
                                            report.T("run `zerolab report` and ask your instructor with its output"))
    for f in ("check_python", "check_torch", "check_jupyter", "check_plot", "check_fonts", "check_memory"):
        monkeypatch.setattr(report, f, fake(f[6:], True))
    monkeypatch.setattr(report, "check_crew", fake("crew", False))
    with i18n.using("zh"):
        assert report.preflight() is False
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "zerolab 课前检查：这台机器能开始上课了吗？"
    assert "这个平台上无法得知空闲内存" in lines[1]
    assert lines[-2].strip() == "修复：运行 `zerolab report`，带着它的输出去问讲师"
    assert lines[-1].startswith("NOT READY（未就绪）：crew: 运行 `zerolab report`")
    monkeypatch.setattr(report, "check_crew", fake("crew", True))
    with i18n.using("zh"):
        assert report.preflight() is True
    assert capsys.readouterr().out.splitlines()[-1] == "READY：这台机器可以开始上课了"
    assert report.preflight() is True
    assert capsys.readouterr().out.splitlines()[-1] == "READY"


def test_preflight_fonts_line_promises_no_boxes():
    with i18n.using("zh"):
        c = report.check_fonts()
    assert CJK.search(c.detail) and ("方框" in c.detail or "中文标注" in c.detail)


# -- the checks, both ways ----------------------------------------------------------------------------

def _fail(check, *args) -> str:
    with pytest.raises(ExerciseCheckFailed) as e:
        check(*args)
    return e.value.message


def test_exercise_0_fails_in_the_editions_language_on_its_ranks():
    """The message is written on a rank: the rank speaks the language of the notebook that started it."""
    from zerolab.course.checks.ch00 import check_ring_all_gather

    def sends_a_placeholder(chunks, rank, world_size, send_recv):     # chunk (r - s + 1): one ahead
        n = world_size
        for s in range(n - 1):
            buf = torch.empty_like(chunks[(rank - s - 1) % n])
            send_recv(chunks[(rank - s + 1) % n], buf)
            chunks[(rank - s - 1) % n] = buf
        return chunks
    en = _fail(lambda fn: check_ring_all_gather(fn, cases=((2, 8),)), sends_a_placeholder)
    assert "chunk 1 holds only the placeholder -1 (nothing arrived in it)" in en and "hint: in step s" in en, en
    with i18n.using("zh"):
        zh = _fail(lambda fn: check_ring_all_gather(fn, cases=((2, 8),)), sends_a_placeholder)
    assert zh.startswith("总 rank 数 2，rank 0：第 1 块里是占位用的 -1（什么也没收到）"), zh
    assert "rank 0 做了什么：" in zh and "提示：第 s 步，rank r 发出它最近收到的那一块" in zh, zh
    assert all(i18n.width(line) <= 100 for line in zh.splitlines() if "做了什么" not in line), zh


def _ring_reduce_scatter(start=1):
    """A ring reduce-scatter; start=0 sends chunk (r - s) (one step too late: a chunk misses a rank)."""
    def fn(chunks, rank, world_size, send_recv):
        n = world_size
        for s in range(n - 1):
            buf = torch.empty_like(chunks[(rank - s - start - 1) % n])
            send_recv(chunks[(rank - s - start) % n], buf)
            chunks[(rank - s - start - 1) % n] += buf
        return chunks
    return fn


def test_exercise_2_fails_in_the_editions_language_on_its_ranks():
    from zerolab.course.checks.ch02 import check_ring_reduce_scatter

    def check(fn):
        check_ring_reduce_scatter(fn, cases=((2, 5),), engine_world_sizes=())
    en = _fail(check, _ring_reduce_scatter(start=0))
    assert en.startswith("world size 2, rank 0: chunk 0 (elements 0..2 of the tensor) is wrong."), en
    assert "holds the contributions of ranks [0]; missing ranks [1]" in en and "Hint: follow one chunk" in en, en
    assert "What rank 0 did: step 0: sent chunk 0, then changed chunk 1." in en, en
    with i18n.using("zh"):
        zh = _fail(check, _ring_reduce_scatter(start=0))
    assert zh.startswith("总 rank 数 2，rank 0：第 0 块（张量的第 0..2 个元素）不对。"), zh
    assert "rank [0] 的贡献；缺了 rank [1]" in zh, zh
    assert "rank 0 做了什么：第 0 步发第 0 块、改第 1 块。" in zh, zh
    assert "提示：沿着环跟住一个块" in zh, zh
    assert len(zh.splitlines()) <= 8 and all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def test_exercise_3_fails_in_the_editions_language():
    """Both rules are judged in this process before any rank starts."""
    from zerolab.course.checks.ch03 import check_adamw_step, check_shard_range

    def reversed_ranges(padded_numel, world_size, rank):        # tiles the buffer, in the wrong order
        size = padded_numel // world_size
        return (world_size - 1 - rank) * size, (world_size - rank) * size

    def coupled(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):   # Adam's L2
        import math
        b1, b2 = betas
        grad = grad + weight_decay * param
        exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
        exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = exp_avg_sq.sqrt() / math.sqrt(1 - b2 ** step) + eps
        param.addcdiv_(exp_avg, denom, value=-lr / (1 - b1 ** step))
    en = _fail(check_shard_range, reversed_ranges)
    assert en.startswith("shard_range: padded_numel = 6, world_size = 2: the pieces tile the buffer, but not in "
                         "rank order") and "hint: rank r's piece starts at r * shard size" in en, en
    en2 = _fail(check_adamw_step, coupled)
    assert "exp_avg is off by up to" in en2 and "hint: that is coupled weight decay" in en2, en2
    with i18n.using("zh"):
        zh = _fail(check_shard_range, reversed_ranges)
        zh2 = _fail(check_adamw_step, coupled)
    assert zh.startswith("shard_range 不对：padded_numel = 6，world_size = 2 时：\n  这些片段铺满了缓冲区，但没按 rank 的顺序"), zh
    assert "提示：rank r 的片段从 r * 分片大小 开始" in zh, zh
    assert zh2.startswith("adamw_step，1000 个元素的随机分片，第 1 步") and "提示：这是耦合的权重衰减" in zh2, zh2
    for text in (zh, zh2):
        assert len(text.splitlines()) <= 8 and all(i18n.width(line) <= 100 for line in text.splitlines()), text


def test_exercise_3b_fails_in_the_editions_language_on_its_ranks():
    """The mistake is seen on a rank, inside the engine: the rank speaks the notebook's language."""
    from zerolab.course.checks.stage2_buckets import check_stage2_buckets, close_crews

    def add_grad(bucket, where, grad, arrived, i, n_params):
        bucket[where] += grad.reshape(-1)
        arrived.add(i)
        return len(arrived) == n_params

    def overwrites(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard):    # = instead of +=
        grad_shard.copy_(reduce_scatter(bucket.to(comm_dtype) / world_size)[rank])

    def check(reduce_bucket):
        check_stage2_buckets(add_grad, reduce_bucket, cases=((2, 2, "fp32", 2, None),))
    try:
        en = _fail(check, overwrites)
        with i18n.using("zh"):
            zh = _fail(check, overwrites)
    finally:
        close_crews()
    assert en.startswith("stage 2, 2 ranks, fp32, accumulation 2: rank 0, bucket 'bucket 0', micro-step 2: "
                         "grad_shard holds only this micro-step's gradient"), en
    assert "hint: accumulate across micro-steps: grad_shard += chunks[rank], not grad_shard = ..." in en, en
    assert zh.startswith("stage 2，2 个 rank，fp32，梯度累积 2 时：\n  rank 0，桶 'bucket 0'，第 2 个微步："
                         "grad_shard 里只有这个微步的梯度"), zh
    assert "提示：跨微步累加：grad_shard += chunks[rank]，而不是 grad_shard = ..." in zh, zh
    assert all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


SUMS_NOT_AVERAGES = """
import torch.distributed as dist

class ShardedOptimizer:                 # DDP by hand, and the gradients summed, never averaged
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        self.optimizer = optimizer_cls(self.params, **kwargs)

    def step(self):
        for p in self.params:
            dist.all_reduce(p.grad)
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()
"""


def test_exercise_3c_fails_in_the_editions_language():
    from zerolab.course.checks import close_crews
    from zerolab.course.checks.zero1 import check

    ns = {"__name__": "zero1_learner_under_test"}       # not importable: sent to the ranks by value
    exec(SUMS_NOT_AVERAGES, ns)
    try:
        en = _fail(check, ns["ShardedOptimizer"])
        with i18n.using("zh"):
            zh = _fail(check, ns["ShardedOptimizer"])
    finally:
        close_crews()
    assert en == ("N=2, SGD, momentum 0.9, after step 1: every update is 2 times DDP's.\n"
                  "  hint: forgot to average: the gradients were summed over the 2 ranks; DDP averages"), en
    assert zh == ("N=2，SGD，动量 0.9，第 1 步之后：每次更新都是 DDP 的 2 倍。\n"
                  "  提示：忘了求平均：梯度在 2 个 rank 上求了和；DDP 求的是平均"), zh


def test_exercise_4_fails_in_the_editions_language():
    from zerolab.course.checks.ch04 import check_sequences

    en = _fail(check_sequences, update_scale(factor=2.0))
    assert en.startswith("sequence 'scale_factor 3: cuts divide by 3, growths multiply by 3'"), en
    assert "hint: you divided by 2, but this scaler's scale_factor is 3" in en, en
    with i18n.using("zh"):
        zh = _fail(check_sequences, update_scale(factor=2.0))
    assert zh.startswith("序列“scale_factor 3：缩小时除以 3，增大时乘以 3”（溢出标志 0010001100000）："), zh
    assert "第一处不同在第 2 次迭代" in zh and "提示：你除以了 2，但这个 scaler 的 scale_factor 是 3" in zh, zh
    assert len(zh.splitlines()) <= 8 and all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def test_exercise_4_fails_in_the_editions_language_on_the_engines_ranks(capsys):
    from zerolab.course.checks.ch04 import check_update_scale

    with i18n.using("zh"):
        zh = _fail(check_update_scale, update_scale(raise_in_engine=True))
    assert capsys.readouterr().out.startswith("序列：8 组 scaler 设置，")
    first, hint = zh.splitlines()[:2]
    assert first.startswith("2 个 rank 上的引擎运行（在你的 update_scale 里），在各 rank 上失败："), zh
    assert "update_scale 抛出了 ValueError：only in the engine" in first and "提示：update_scale 在某个 rank" in hint, zh


def test_exercise_8_fails_in_the_editions_language():
    from zerolab.course.checks import close_crews
    from zerolab.course.checks.ch08 import check_knobs

    good = {"A": {"stage3_param_persistence_threshold": 64},
            "B": {"stage3_param_persistence_threshold": 64, "stage3_max_live_parameters": 14336,
                  "stage3_max_reuse_distance": 0},
            "C": {"stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 0}}
    one_short = {**good, "A": {"stage3_param_persistence_threshold": 63}}     # numel < threshold
    try:
        en = _fail(lambda knobs: check_knobs(knobs, verbose=False), one_short.get)
        with i18n.using("zh"):
            zh = _fail(lambda knobs: check_knobs(knobs, verbose=False), one_short.get)
            zh_list = _fail(lambda knobs: check_knobs(knobs, verbose=False), {**good, "A": [("x", 1)]}.get)
    finally:
        close_crews()
    # the first line alone says the mistake and its fix (Jupyter's short display may cut the rest)
    assert en.startswith("goal A: 0 of 8 biases persistent; fix: stage3_param_persistence_threshold >= 64\n"), en
    assert "\n  the goal: biases whole, weights sharded" in en, en
    assert "hint: off by one: the rule is numel <= threshold" in en, en
    assert zh.startswith("目标 A：8 个偏置中有 0 个常驻；改法：stage3_param_persistence_threshold >= 64\n"), zh
    assert "\n  目标：偏置完整、权重分片" in zh, zh
    assert "  提示：差了一个：规则是 numel <= 阈值，所以 64 个元素的偏置需要阈值 64 或更大" in zh, zh
    assert zh_list.startswith("目标 A：knobs('A') 返回了 list\n  提示：返回一个由 stage 3 的键组成的 dict"), zh_list
    assert all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def _host_step(unscale=True):
    """Exercise 5's loop over sub-groups; unscale=False forgets to multiply by 1 / combined."""
    def fn(home, optimizer, grads, combined):
        inv = 1.0 / combined if unscale else 1.0
        for sg in home.sub_groups:
            for j in sg:
                i, a, b = home.tiles[j]
                home.tensors[j].grad = grads[i][a:b].to(torch.float32) * inv
            optimizer.step()
            for j in sg:
                i, a, b = home.tiles[j]
                home.tensors[j].grad = None
                home.stage.write_params(i, a, home.tensors[j])
    return fn


def test_exercise_5_fails_in_the_editions_language_alone_and_on_the_engines_ranks():
    from zerolab.course.checks import close_crews
    from zerolab.course.checks.ch05 import check_alone, check_engine

    en = _fail(check_alone, _host_step(unscale=False))
    assert en.startswith("alone, groups of [50, 23, 81] elements, sub_group_size 40 (5 sub-groups), step 1: "
                         "sub-group 0,"), en
    assert "hint: forgot to unscale: multiply by 1 / combined" in en, en
    with i18n.using("zh"):
        zh = _fail(check_alone, _host_step(unscale=False))
        try:
            zh_engine = _fail(lambda fn: check_engine(fn, cases=((1, "fp16", False),), sizes=(37,)),
                              _host_step(unscale=False))
        finally:
            close_crews()
    assert zh.startswith("单独检查，各组 [50, 23, 81] 个元素，sub_group_size 40（5 个子组），第 1 步：子组 0，"), zh
    assert "  提示：忘了去缩放：转成 fp32 之后乘以 1 / combined（435.2：损失缩放值乘以裁剪系数）" in zh, zh
    assert zh_engine.startswith("引擎，stage 1, fp16, sub_group_size 37，第 1 次优化器更新：子组 0，"), zh_engine
    assert "提示：忘了去缩放" in zh_engine, zh_engine
    for text in (zh, zh_engine):
        assert len(text.splitlines()) <= 8 and all(i18n.width(line) <= 100 for line in text.splitlines()), text


def test_exercise_9_fails_in_the_editions_language():
    """The config is judged in this process, before any rank starts."""
    from zerolab.course.checks.ch09 import check_alone, reference_config

    def log_warmup(world_size):                  # DeepSpeed's default warmup_type, 'log'
        cfg = reference_config(world_size)
        del cfg["scheduler"]["params"]["warmup_type"]
        return cfg
    en = _fail(check_alone, log_warmup)
    assert en.startswith("capstone_config(1): the learning rate at step 2\n  expected: 0.0004"), en
    assert "hint: DeepSpeed's default warmup_type is 'log'" in en, en
    with i18n.using("zh"):
        zh = _fail(check_alone, log_warmup)
    assert zh.startswith("capstone_config(1)：第 2 步的学习率\n  期望：0.0004（15 步内从 0 预热到 6e-3"), zh
    assert "  提示：DeepSpeed 默认的 warmup_type 是 'log'（先快后慢）" in zh, zh
    assert all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def test_exercise_13_fails_in_the_editions_language():
    """Part 1 runs in this process, before any rank starts."""
    from zerolab.zeropp import quant
    from zerolab.course.checks.ch13 import check_alone

    def truncates(x, groups, bits=8):             # .to(torch.int8) without rounding first
        blocks = x.reshape(-1).float().view(groups, -1)
        m = blocks.abs().amax(1, keepdim=True)
        q_scale = torch.where(m == 0, torch.ones(()), 2 ** bits / (2 * m))
        q = (blocks * q_scale).clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1).to(torch.int8)
        return q.reshape(-1), (1 / q_scale).reshape(-1)
    en = _fail(lambda fn: check_alone(fn, quant.dequantize), truncates)
    assert en.startswith("a weight shard in fp16, 4 blocks of 96: 384 x float16, groups=4, bits=8\n"
                         "  q differs from DeepSpeed's at element 0"), en
    assert "hint: your values are truncated toward zero" in en, en
    with i18n.using("zh"):
        zh = _fail(lambda fn: check_alone(fn, quant.dequantize), truncates)
    assert zh.startswith("fp16 的权重分片，4 个块，每块 96 个元素：384 个 float16，groups=4，bits=8\n"
                         "  q 在元素 0 处与 DeepSpeed 的不同"), zh
    assert "  提示：你的值被向零截断了" in zh, zh
    assert all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def test_exercise_8c_fails_in_the_editions_language():
    """The solution's hooks (the stored solution notebook) with the release left out."""
    import nbformat
    from zerolab.course.checks import close_crews
    from zerolab.course.checks.hooks3 import check_gather_hooks

    cell = next(c.source for c in nbformat.read(ROOT / "solutions" / "08c_gather_hooks.ipynb", as_version=4).cells
                if c.cell_type == "code" and c.source.startswith("class MyHooks"))
    release = "                ps.after_forward(ps.groups[i])   # release, unless the reuse distance keeps it\n"
    assert release in cell, "the solution no longer releases in this line: update this test"
    ns = {"__name__": "hooks3_learner_under_test"}           # not importable: sent to the ranks by value
    exec("import torch\nfrom zerolab.zero.stage3.hooks import on_first_output_grad, on_inputs_grad, unwatch_params, watch_params\n"
         + cell.replace(release, "                pass\n"), ns)
    try:
        en = _fail(lambda cls: check_gather_hooks(cls, worlds=(2,), verbose=False), ns["MyHooks"])
        with i18n.using("zh"):
            zh = _fail(lambda cls: check_gather_hooks(cls, worlds=(2,), verbose=False), ns["MyHooks"])
    finally:
        close_crews()
    assert en.startswith("stage 3 on 2 ranks, rank 0, your hooks in the engine: never released: peak 2,928 vs "
                         "1,344"), en
    assert "hint: you never release" in en, en
    assert zh.startswith("2 个 rank 上的 stage 3，rank 0，引擎里用的是你的钩子：\n  从不释放：同一时刻收集的元素峰值 "
                         "2,928，zerolab 的钩子是 1,344"), zh
    assert "第 1 个事件：zerolab 的钩子在前向中释放 'embed.weight'；你的在前向中收集 'attn.in_proj_weight'" in zh, zh
    assert "提示：你从不释放" in zh and all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def test_exercise_1_fails_in_the_editions_language(monkeypatch):
    """Measured backpacks stood in by the formula (the real engine's: tests/test_exercises.py)."""
    from zerolab.course.checks import ch01

    def right(psi, precision, stage=0, world_size=1):
        p, g, o = (4, 4, 8) if precision == "fp32" else (2, 2, 12)
        return {"params": psi * p // (world_size if stage >= 3 else 1),
                "grads": psi * g // (world_size if stage >= 2 else 1),
                "optimizer_states": psi * o // (world_size if stage >= 1 else 1)}

    def unsplit_notebook(psi, precision, stage=0, world_size=1):      # stage 1 forgotten: no division
        return {**right(psi, precision, stage, world_size),
                "optimizer_states": right(psi, precision, 0, world_size)["optimizer_states"]}
    psi = 49_280
    fake = [[{"stage": st, "precision": pr, "psi": psi, "memory": right(psi, pr, st, 2), "groups": 1}
             for st, pr in ch01.CASES] for _ in range(2)]
    monkeypatch.setitem(ch01._MEASURED, 2, fake)
    en = _fail(ch01.check_model_state_bytes, unsplit_notebook)
    assert "the optimizer states (the heavy notebook) are off." in en and "your number is 2 times too big" in en
    with i18n.using("zh"):
        zh = _fail(ch01.check_model_state_bytes, unsplit_notebook)
    assert zh.startswith("stage 1，fp32，2 个 rank，Adam，Ψ = 49,280 个参数："), zh
    assert "优化器状态（小本子）对不上。" in zh and "提示：你的数是实测的 2 倍：stage 1 把优化器状态（小本子）分给" in zh, zh
    assert all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def test_exercise_6_fails_in_the_editions_language():
    from zerolab.course.checks.ch06 import check_alone

    def off_by_one(named, limit):       # closes a bucket that is exactly full (>= instead of >)
        out, cur, size = [], [], 0
        for i, (_, p) in enumerate(named):
            if cur and size + p.numel() >= limit:
                out.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += p.numel()
        return out + [cur]
    en = _fail(check_alone, off_by_one)
    assert en.startswith("buckets filled exactly to the limit: sizes") and "off by one at the boundary" in en
    with i18n.using("zh"):
        zh = _fail(check_alone, off_by_one)
    assert zh.startswith("正好装到上限的桶：大小") and "边界上差了一个" in zh and "（不是 >=）" in zh, zh
    assert all(i18n.width(line) <= 100 for line in zh.splitlines()), zh


def test_exercise_7_fails_in_the_editions_language():
    from zerolab.course.checks.ch07 import check_device_bytes, reference_device_bytes

    def no_activations(facts, *rung):
        return reference_device_bytes(facts, *rung) - facts.activation_bytes
    en = _fail(check_device_bytes, no_activations)
    assert "the activations (facts.activation_bytes) are on the device at the peak" in en
    with i18n.using("zh"):
        zh = _fail(check_device_bytes, no_activations)
    assert "期望" in zh and "峰值时激活值（facts.activation_bytes）在设备上" in zh, zh


def test_exercise_14_fails_in_the_editions_language_in_a_zh_folder(tmp_path):
    """As in a kernel of exercises/zh/: the language comes from the folder, nothing else set."""
    folder = tmp_path / "exercises" / "zh"
    folder.mkdir(parents=True)
    code = ("from zerolab.course.checks.ch14 import check_tokens_to_hide\n"
            "def no_ring(peak, mfu, beta, n, ck=False):\n"
            "    return 3 * 2 * peak * mfu / ((8 if ck else 6) * beta)\n"
            "check_tokens_to_hide(no_ring)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ZEROLAB_LANG", "JPY_SESSION_NAME")}
    env.update(PYTHONPATH=str(ROOT), LANG="C.UTF-8", ZEROLAB_PROGRESS="off")
    r = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert "ExerciseCheckFailed" in r.stderr, r.stderr
    assert "提示：每个 rank 对它收集或 reduce-scatter 的每个张量只发出 (N-1)/N" in r.stderr, r.stderr
    # the same check in English from any other folder: tests/test_ch14_check.py; the folder rule itself: above


# -- figures and the lab ------------------------------------------------------------------------------

@pytest.fixture
def no_cjk_font(monkeypatch):
    from zerolab.course import viz
    monkeypatch.setattr(viz, "_CJK_FONT", [None])
    monkeypatch.setattr(viz, "_SAID_ENGLISH", False)
    return viz


def test_a_chinese_figure_without_a_cjk_font_keeps_english_and_says_so_once(no_cjk_font, capsys):
    from zerolab.course.lab.common import F
    assert F("elements ({n} flat groups)", n=3) == "elements (3 flat groups)"     # English edition: nothing said
    assert capsys.readouterr().out == ""
    with i18n.using("zh"):
        assert F("elements ({n} flat groups)", n=3) == "elements (3 flat groups)"
        assert F("bytes") == "bytes"
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and "没有中文字体" in said and "不会显示成方框" in said, said


def test_a_chinese_figure_with_a_cjk_font_labels_in_chinese(monkeypatch):
    import matplotlib
    from zerolab.course import viz
    from zerolab.course.lab.common import F
    monkeypatch.setattr(viz, "_CJK_FONT", ["DejaVu Sans"])          # stands in for an installed CJK family
    with matplotlib.rc_context(), i18n.using("zh"):
        assert F("elements ({n} flat groups)", n=3) == "元素（3 个扁平组）"
        assert matplotlib.rcParams["font.sans-serif"][0] == "DejaVu Sans"


def test_the_labs_figures_draw_no_missing_glyph_in_the_chinese_edition(no_cjk_font):
    """Rendered for real: without a CJK font the Chinese edition's figure has no glyph matplotlib lacks."""
    import io
    import warnings
    from zerolab.course import lab
    with i18n.using("zh"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = lab.draw_plan(lab.plan("Llama-2 7B", 8))
        fig.savefig(io.BytesIO(), format="png")
    texts = [t.get_text() for ax in fig.axes for t in (ax.title, ax.yaxis.label)]
    assert not [w for w in caught if "missing from" in str(w.message)], [str(w.message) for w in caught]
    assert not any(CJK.search(t) for t in texts) and "GB per GPU" in texts, texts


def test_the_labs_controls_speak_the_editions_language():
    pytest.importorskip("ipywidgets")
    from zerolab.course.lab.common import _run_controls
    assert [w.description for w in _run_controls(2, 1, "bf16", 4)] == ["N ranks", "stage", "precision"]
    with i18n.using("zh"):
        assert [w.description for w in _run_controls(2, 1, "bf16", 4)] == ["rank 数 N", "ZeRO 阶段", "精度"]


def test_a_check_run_from_the_chinese_solutions_is_not_the_learners(monkeypatch, tmp_path):
    for folder in ("solutions/zh", "exercises/zh", "solutions", "notebooks/zh"):
        monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / folder / "06_bucket_params.ipynb"))
        assert progress.running_a_solution() == folder.startswith("solutions"), folder
    monkeypatch.delenv("JPY_SESSION_NAME")
    (tmp_path / "solutions" / "zh").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "solutions" / "zh")
    assert progress.running_a_solution()


# -- what a Chinese learner reads outside the checks: the config reader, a rank's error, zerolab report ---

BAD_CONFIG = {"train_batch_size": 8, "zero_optimization": {"stage": 5, "offload_optimzer": {}},
              "fp16": {"enabled": True, "loss_scale_window": 0}, "flops_profiler": {"enabled": True},
              "optimizer": {"type": "Lion"}, "scheduler": {"type": "WarmupLR", "params": {"warmup_max": 1}}}


def _config_error(config, world_size=2):
    from zerolab.config import ConfigError, load_config
    with pytest.raises(ConfigError) as e:
        load_config(config, world_size)
    return e.value


def test_config_errors_in_the_editions_language():
    """A bad key, a bad value, a refused key, the batch arithmetic: Chinese in a Chinese kernel,
    English (word for word as before) elsewhere; the same problems in the same order."""
    en = _config_error(BAD_CONFIG)
    with i18n.using("zh"):
        zh = _config_error(BAD_CONFIG)
        batch = str(_config_error({"train_batch_size": 9, "gradient_accumulation_steps": 2}))
        auto = str(_config_error({"train_batch_size": "auto"}))
    assert str(en).startswith("6 problems in the DeepSpeed config:\n"), en
    assert "  - 'zero_optimization.stage' must be an integer in 0..3, got 5" in str(en), en
    assert "unknown key 'offload_optimzer' in 'zero_optimization'; did you mean 'offload_optimizer'?" in str(en)
    assert not any(CJK.search(p) for p in en.problems)
    text = str(zh)
    assert text.startswith("DeepSpeed 配置里有 6 处问题：\n"), text
    assert len(zh.problems) == len(en.problems) and zh.not_implemented == en.not_implemented
    for want in ("'zero_optimization.stage' 应为整数（取值 0..3），实际是 5",
                 "'zero_optimization' 里有未知的键 'offload_optimzer'；你是不是想写 'offload_optimizer'？",
                 "'fp16.loss_scale_window' 应为整数（大于 0），在开启动态损失缩放时（fp16 已启用、loss_scale 为 0），实际是 0",
                 "'flops_profiler' 是 zerolab 尚未实现的 DeepSpeed 键（FLOPs 分析器）：删掉它",
                 "（Lion 优化器；zerolab 能构建 Adam、AdamW 和 SGD）：这里它的值是 \"Lion\"；删掉它，或设为 \"AdamW\"",
                 "WarmupLR 的 'scheduler.params' 里有未知的键 'warmup_max'；你是不是想写"):
        assert want in text, (want, text)
    assert all(CJK.search(p) for p in zh.problems), zh.problems
    assert batch.startswith("检查批大小参数：train_batch_size 不等于") and "9 != 2 * 2 * 2（" in batch, batch
    assert "train_micro_batch_size_per_gpu 推导为 9 // 2 // 2 = 2" in batch, batch
    assert auto.startswith("'train_batch_size' 是 \"auto\"") and auto.endswith("请改为给出整数（大于 0）"), auto


def test_every_refused_or_removed_key_says_what_it_does_in_chinese():
    """A refusal names the DeepSpeed feature (config_keys' tables): a row added or reworded in English
    without its Chinese fails here."""
    from zerolab.config import keys as K
    tables = [K.TOP, K.ZERO, K.FP16, K.BF16, K.OFFLOAD_OPTIMIZER, K.OFFLOAD_PARAM, K.OPTIMIZER,
              *K.OPTIMIZER_PARAMS.values(), K.ZEROLAB, K.AIO, K.SCHEDULER]
    missing = sorted({key.what for table in tables for key in table.values()
                      if key.status in (K.NOT_IMPLEMENTED, K.REMOVED) and key.what not in ZH["config"]})
    assert not missing, "zerolab/i18n/messages_zh.py, section 'config', lacks:\n" + "\n".join(map(repr, missing))


def test_every_key_with_no_effect_says_why_in_chinese():
    """``zerolab explain`` and the engine's warning give the reason a key does nothing (config_keys'
    NO_EFFECT rows): a row added or reworded in English without its Chinese fails here."""
    from zerolab.config import keys as K
    tables = [K.TOP, K.ZERO, K.ZEROPP_BELOW_STAGE3, K.FP16, K.BF16, K.OFFLOAD_OPTIMIZER, K.OFFLOAD_PARAM,
              {"off": K.OFFLOAD_OFF}, K.OPTIMIZER, *K.OPTIMIZER_PARAMS.values(), K.ZEROLAB, K.AIO, K.SCHEDULER]
    whats = {key.what for table in tables for key in table.values() if key.status == K.NO_EFFECT}
    assert len(whats) > 20, whats
    missing = sorted(whats - set(ZH["config"]))
    assert not missing, "zerolab/i18n/messages_zh.py, section 'config', lacks:\n" + "\n".join(map(repr, missing))


# every branch of zerolab explain: stage 3 with ZeRO++, offload to NVMe, a static scale, a schedule,
# no-effect keys, zerolab's own switches; and the configs the course ships
EXPLAIN_RICH = {
    "train_batch_size": 16, "gradient_clipping": 1.0, "steps_per_print": 5, "wall_clock_breakdown": True,
    "fp16": {"enabled": True, "loss_scale": 128, "auto_cast": True},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
    "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}},
    "zero_optimization": {
        "stage": 3, "zero_quantized_weights": True, "zero_hpz_partition_size": 2, "zero_quantized_gradients": True,
        "stage3_model_persistence_threshold": 1000, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0,
        "overlap_comm": True, "sub_group_size": 1000, "round_robin_gradients": True,
        "offload_param": {"device": "nvme", "nvme_path": "/nvme"},
        "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "pipeline_read": True}},
    "zerolab": {"order_checks": True}}
EXPLAIN_STAGES = [
    {"train_batch_size": 8, "bf16": {"enabled": True}, "zero_optimization": {"stage": 1, "reduce_scatter": False,
                                                                             "overlap_comm": True}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 2, "use_multi_rank_bucket_allreduce": False,
                                                  "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 2}, "zerolab": {"ideal_reduce_scatter": True}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 0, "overlap_comm": True}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 3, "reduce_scatter": False, "overlap_comm": False}}]


def test_zerolab_explain_in_chinese_and_in_english(tmp_path, capsys):
    """Every line of zerolab explain in Chinese (names, keys and numbers aside), for every branch; the
    English is what it was (the same with --lang en as with no flag)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from nbtext import english_runs
    paths, rich = sorted((ROOT / "configs").glob("*.json")), ""
    for i, cfg in enumerate([EXPLAIN_RICH, *EXPLAIN_STAGES]):
        paths.append(tmp_path / f"c{i}.json")
        paths[-1].write_text(__import__("json").dumps(cfg))
    for path in paths:
        assert cli(["explain", str(path), "--world", "4", "--params", "7e9"]) == 0
        en = capsys.readouterr().out
        assert cli(["explain", str(path), "--world", "4", "--params", "7e9", "--lang", "en"]) == 0
        assert capsys.readouterr().out == en and not CJK.search(en)
        assert cli(["explain", str(path), "--world", "4", "--params", "7e9", "--lang", "zh"]) == 0
        zh = capsys.readouterr().out
        rich = zh if path.name == "c0.json" else rich
        assert len(zh.splitlines()) == len(en.splitlines()), (en, zh)
        for line in zh.splitlines():
            table_row = re.match(r"^  (stage|[0-3] ) ", line)
            assert not line.strip() or table_row or CJK.search(line), f"{path.name}: {line!r}"
            assert not english_runs(line), f"{path.name}: English left: {english_runs(line)} in {line!r}"
    for want in ("ZeRO stage 3，4 个数据并行 rank：优化器状态、梯度和参数都分片。", "静态损失缩放值 128",
                 "qwZ（zero_quantized_weights）", "hpZ（zero_hpz_partition_size 2）", "顺序检查 [zerolab 自己的做法",
                 "  - steps_per_print = 5：DeepSpeed 每 N 步打印一次进度", "学习率调度：WarmupLR(",
                 "  NVMe 上：", "   <- 本配置"):
        assert want in rich, (want, rich)


def test_zerolab_explain_errors_in_chinese(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"train_batch_size": 30, "gradient_accumulation_steps": 4, "zero_optimisation": {}, '
                    '"flops_profiler": {"enabled": true}}')
    assert cli(["explain", str(path), "--world", "3", "--lang", "zh"]) == 2
    out, err = capsys.readouterr()
    assert "zerolab 未实现：flops_profiler = " in out and "FLOPs 分析器" in out, out
    head, *errors = err.splitlines()
    assert head.startswith(f"zerolab explain：{path} 里有 2 处错误"), err
    assert errors and all(CJK.search(e) for e in errors), err


def test_the_engines_warnings_in_the_editions_language(monkeypatch):
    from zerolab import config
    from zerolab.zero import attach
    from zerolab.zeropp import hpz
    cfg = config.load_config({"train_batch_size": 2, "steps_per_print": 5}, 1)
    monkeypatch.setattr(attach, "_WARNED", set())
    with i18n.using("zh"), pytest.warns(UserWarning) as zh:
        attach.warn_ignored_settings(cfg, 0)
        hpz.hpz_group_size(8, 4)
    assert [str(w.message) for w in zh] == [
        "steps_per_print 在 zerolab 里不起作用：DeepSpeed 每 N 步打印一次进度；只影响日志，zerolab 不打印进度行",
        str(zh[1].message)] and str(zh[1].message).startswith("zero_optimization.zero_hpz_partition_size=8 超过了"), zh
    monkeypatch.setattr(attach, "_WARNED", set())
    with i18n.using("en"), pytest.warns(UserWarning) as en:
        attach.warn_ignored_settings(cfg, 0)
    assert str(en[0].message) == ("steps_per_print has no effect in zerolab: DeepSpeed logs progress every N steps; "
                                  "logging only, zerolab prints no progress lines")


def test_a_ranks_error_summary_in_the_editions_language():
    """The lines zerolab writes around a rank's traceback (the traceback itself is the rank's own)."""
    from zerolab.crew import CrewTimeout, RankError, TooManyRanks
    failures = {0: {"type": "RuntimeError", "message": "Connection closed by peer", "traceback": "tb0"},
                1: {"type": "ValueError", "message": "bad shape", "traceback": "tb1"},
                2: {"type": "RankDied", "message": "rank 2 died during run", "traceback": ""}}
    en = str(RankError(failures, "; ranks [3] were still running and were stopped"))
    assert en.splitlines()[:4] == ["rank 1 raised ValueError: bad shape",
                                   "(ranks that failed: 0, 1, 2; ranks [3] were still running and were stopped)",
                                   "", "--- traceback from rank 1 ---"], en
    with i18n.using("zh"):
        from zerolab.crew import crew
        from zerolab.crew import limits as crew_limits
        zh = str(RankError(failures, crew_limits.T("; ranks {ranks} were still running and were stopped",
                                                   ranks=[3])))
        died = str(RankError({2: {"type": "RankDied", "message": crew._died(2, "run", -9), "traceback": ""}}))
        timeout = str(CrewTimeout([0, 1], 30))
        too_many = str(TooManyRanks(4, 2, "ZEROLAB_MAX_RANKS=2"))
    assert zh.splitlines()[:4] == ["rank 1 抛出了 ValueError：bad shape",
                                   "（失败的 rank：0, 1, 2；rank [3] 当时还在运行，已被停止）",
                                   "", "--- rank 1 的回溯 ---"], zh
    assert "--- rank 0 的回溯 ---" in zh and "tb0" in zh and "tb1" in zh, zh
    assert died.splitlines()[0] == "rank 2 在运行任务时意外退出（退出码 -9）", died
    assert "（没有：进程结束时没有 Python 异常；它打印的内容在上面）" in died, died
    assert timeout.startswith("rank [0, 1] 没能在 30 s 内完成；这个 Crew 已停止"), timeout
    assert too_many.startswith("要的是 4 个 rank 的 Crew，但 ZEROLAB_MAX_RANKS=2 在这里最多只允许 2 个"), too_many
    assert crew._died(2, "start") == "rank 2 died during start"


def _load_a_bad_config():
    from zerolab.config import load_config
    load_config({"train_batch_size": 4, "zero_optimization": {"stage": 4}}, 1)


def test_a_rank_speaks_the_language_of_the_notebook_that_runs_it():
    """A config error raised inside a rank (the engine built there) and its summary, both Chinese."""
    import zerolab
    with zerolab.Crew(2, echo=False) as crew:
        with i18n.using("zh"), pytest.raises(zerolab.RankError) as zh:
            crew.run(_load_a_bad_config)
        with pytest.raises(zerolab.RankError) as en:
            crew.run(_load_a_bad_config)
    assert str(zh.value).splitlines()[0] == ("rank 0 抛出了 ConfigError："
                                             "'zero_optimization.stage' 应为整数（取值 0..3），实际是 4"), zh.value
    assert str(en.value).splitlines()[0] == ("rank 0 raised ConfigError: "
                                             "'zero_optimization.stage' must be an integer in 0..3, got 4"), en.value


def test_zerolab_report_in_chinese_and_in_english(capsys):
    """Every label and verdict of the one-screen report in Chinese; the values in one column."""
    assert cli(["report", "--lang", "zh"]) == 0
    zh = capsys.readouterr().out.splitlines()
    assert zh[0].startswith("zerolab ") and "环境报告" in zh[0], zh
    names = ("python", "torch", "torch.distributed", "GPUs", "CPU")        # names, in both languages
    rows = [m for m in map(re.compile(r"^( *)(\S.*?) (\.+) (.*)$").match, zh) if m]
    assert len(rows) >= 14, zh
    for m in rows:
        indent, label, dots, value = m.groups()
        assert label in names or CJK.search(label), m.group(0)
        assert i18n.width(indent + label) + len(dots) == (19 if indent else 18), m.group(0)   # one column
    assert "课程在这里能运行什么：" in zh and any("学员自检" in line for line in zh), zh
    assert cli(["report", "--lang", "en"]) == 0
    en = capsys.readouterr().out
    assert "every chapter .... yes" in en and "learner's check .. zerolab report --preflight" in en
    assert not CJK.search(en), en


def test_matplotlibs_last_resort_font_is_not_a_cjk_font(monkeypatch):
    """matplotlib (3.10+) bundles "Last Resort High-Efficiency", which maps every code point to a box:
    found by the glyph lookup it would put boxes in every Chinese figure; it is skipped."""
    from matplotlib import font_manager
    from zerolab.course import viz
    last = [f for f in font_manager.fontManager.ttflist if f.name.startswith("Last Resort")]
    if not last:
        pytest.skip("this matplotlib has no Last Resort font")
    monkeypatch.setattr(font_manager.fontManager, "ttflist", last)
    monkeypatch.setattr(viz, "_CJK_FONT", [])
    assert viz.cjk_font() is None


# -- around the training step: the engine's own exceptions (checkpoint, deepspeed, comm, topology, models,
#    zerolab train / simulate / consolidate) ---------------------------------------------------------------

def _save_then_load_into_another_model(ckpt):
    """Chapter 9's mistake: a checkpoint of one model loaded into another (wider, one more block)."""
    import zerolab
    from zerolab.models import TinyLM
    cfg = {"train_batch_size": 4, "zero_optimization": {"stage": 2},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    engine = zerolab.initialize(TinyLM(), cfg)
    engine.save_checkpoint(ckpt, tag="night")
    engine.close()
    other = zerolab.initialize(TinyLM(d=28, layers=3), cfg)
    try:
        other.load_checkpoint(ckpt)
    except zerolab.CheckpointError as e:
        return str(e)
    finally:
        other.close()


def test_a_checkpoint_of_another_model_in_the_editions_language(tmp_path):
    """Every rank decides together and says why, in the language of the notebook that runs it."""
    import zerolab
    with zerolab.Crew(2, echo=False) as crew:
        with i18n.using("zh"):
            zh = crew.run(_save_then_load_into_another_model, str(tmp_path / "zh"))
        en = crew.run(_save_then_load_into_another_model, str(tmp_path / "en"))
    assert zh[0] == zh[1] and en[0] == en[1], (zh, en)
    assert en[0].startswith("rank 0: the checkpoint is of another model (missing from the checkpoint: blocks.2."), en
    assert "; blocks.0.ln.bias: checkpoint [26], model [28]; " in en[0], en
    assert en[0].endswith("). Nothing was loaded.") and not CJK.search(en[0]), en
    assert zh[0].startswith("rank 0 报错：这个检查点属于另一个模型（检查点里缺少：blocks.2."), zh
    assert "；blocks.0.ln.bias：检查点里是 [26]，模型里是 [28]；" in zh[0], zh
    assert zh[0].endswith("）。什么都没有加载。"), zh


def test_deepspeed_initialize_misused_in_the_editions_language():
    """A DeepSpeed script that forgets its config, or gives it twice: DeepSpeed's own words in English;
    in Chinese what to do, then DeepSpeed's words (to search for)."""
    import argparse
    import zerolab.deepspeed as deepspeed
    from zerolab.models import TinyLM
    args = argparse.Namespace(deepspeed_config="ds.json")
    with pytest.raises(ValueError) as en:
        deepspeed.initialize(model=TinyLM(), model_parameters=TinyLM().parameters())
    with pytest.raises(ValueError) as en_twice:
        deepspeed.initialize(args=args, model=TinyLM(), config={"train_batch_size": 2})
    assert str(en.value) == "DeepSpeed requires --deepspeed_config to specify configuration file"
    assert str(en_twice.value) == ("Not sure how to proceed, we were given deepspeed configs in the deepspeed "
                                   "arguments and deepspeed.initialize() function call")
    with i18n.using("zh"):
        with pytest.raises(ValueError) as zh:
            deepspeed.initialize(model=TinyLM(), model_parameters=TinyLM().parameters())
        with pytest.raises(ValueError) as zh_twice:
            deepspeed.initialize(args=args, model=TinyLM(), config={"train_batch_size": 2})
        with pytest.raises(NotImplementedError) as zh_mpu:
            deepspeed.initialize(model=TinyLM(), mpu=object(), config={"train_batch_size": 2})
    assert str(zh.value).startswith("没有 DeepSpeed 配置：请传 config=（字典或 JSON 文件路径），或者在命令行用 "
                                    "--deepspeed_config 指定配置文件"), zh.value
    assert str(zh.value).endswith(f"（DeepSpeed 的原话：{en.value}）"), zh.value
    assert str(zh_twice.value).startswith("DeepSpeed 配置给了两份") and str(en_twice.value) in str(zh_twice.value)
    assert str(zh_mpu.value) == "mpu / mesh_param（模型并行或序列并行）：zerolab 只做数据并行", zh_mpu.value


def _reduce_scatter_unpadded():
    import zerolab
    comm = zerolab.Comm()
    try:
        comm.reduce_scatter(torch.zeros(3), torch.zeros(7))
    except ValueError as e:
        return str(e)


def test_collectives_topology_and_models_errors_in_the_editions_language():
    """A flat buffer not padded to the world size (on 2 ranks), a node size that does not divide the
    world, a width that does not split into heads."""
    import zerolab
    from zerolab.models import GPT
    from zerolab.crew.topology import Topology
    with zerolab.Crew(2, echo=False) as crew:
        with i18n.using("zh"):
            zh = crew.run(_reduce_scatter_unpadded)
        en = crew.run(_reduce_scatter_unpadded)
    assert en[0] == ("reduce_scatter: input has 7 elements, expected 2 x 3 (pad the flat buffer to a multiple of "
                     "the world size)"), en
    assert zh[0] == "reduce_scatter：输入有 7 个元素，应为 2 x 3（请把扁平缓冲区补齐到总 rank 数的整数倍）", zh
    errors = {}
    for lang in ("en", "zh"):
        with i18n.using(lang):
            with pytest.raises(ValueError) as topo:
                Topology(6, 4)
            with pytest.raises(ValueError) as heads:
                GPT(11, d=10, heads=3)
        errors[lang] = (str(topo.value), str(heads.value))
    assert errors["en"] == ("Topology: ranks_per_node=4 must be a whole number >= 1 that divides world_size=6 (every "
                            "node holds the same number of ranks, as under torchrun)",
                            "width 10 does not split into 3 heads")
    assert errors["zh"] == ("Topology：ranks_per_node=4 必须是 >= 1 且能整除 world_size=6 的整数（每个节点上的 rank "
                            "数相同，和 torchrun 下一样）", "宽度 10 不能均分成 3 个注意力头")


def test_zerolab_simulate_train_and_consolidate_errors_in_chinese_and_in_english(tmp_path, capsys):
    """zerolab simulate given no --params (--layers and --hidden it derives), or a node size that does not divide the GPUs; zerolab train
    given a bad config; zerolab consolidate given no checkpoint: --lang zh, English as before."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"train_batch_size": 3, "zero_optimization": {"stage": 7}}')
    runs = {"simulate": ["simulate", "--layers", "32"],
            "nodes": ["simulate", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--ranks-per-node", "3"],
            "train": ["train", "--config", str(bad), "--nproc", "2"],
            "consolidate": ["consolidate", str(tmp_path / "nowhere"), str(tmp_path / "m.safetensors")]}
    err = {}
    for lang in ("en", "zh"):
        for name, argv in runs.items():
            assert cli([*argv, "--lang", lang]) == 2, (name, lang)
            out, err[name, lang] = capsys.readouterr()
            assert not out, out
    assert err["simulate", "en"] == "zerolab simulate: --params required (or --calibrate)\n"
    assert err["simulate", "zh"] == "zerolab simulate：缺少 --params（或者改用 --calibrate）\n"
    assert err["nodes", "en"] == "zerolab simulate: ranks_per_node=3 must divide gpus=8 (whole nodes)\n"
    assert err["nodes", "zh"] == "zerolab simulate：ranks_per_node=3 必须整除 gpus=8（要能分成整数个节点）\n"
    assert err["train", "en"].startswith("zerolab train: 2 problems in the DeepSpeed config:\n"), err
    assert err["train", "zh"].startswith("zerolab train：DeepSpeed 配置里有 2 处问题：\n"), err
    assert err["consolidate", "en"].startswith("zerolab consolidate: no 'latest' file in "), err
    assert err["consolidate", "zh"].startswith("zerolab consolidate：") and "里没有 'latest' 文件：请传 tag=" in \
        err["consolidate", "zh"], err
    assert not any(CJK.search(text) for (_, lang), text in err.items() if lang == "en"), err


# -- the engine's own errors: what a learner meets when a run goes wrong --------------------------------

@pytest.fixture(scope="module")
def crew2():
    import zerolab
    with zerolab.Crew(2, echo=False) as crew:
        yield crew


def test_out_of_device_memory_in_the_editions_language(crew2):
    """Chapter 5's DDP under device_budget='1MiB' (chapter 7 meets the same error in forward): on
    each rank, the error, its consumers and the configs that fit in Chinese; English as before."""
    from zerolab.course.chapters import ch05
    with i18n.using("zh"):
        zh = crew2.run(ch05.try_budget, {"stage": 0}, "1MiB", 1)
    en = crew2.run(ch05.try_budget, {"stage": 0}, "1MiB", 1)
    assert all(r["is_torch_oom"] for r in zh + en)
    lines = en[0]["error"].splitlines()
    assert lines[0].startswith("rank 0: out of device memory in set-up (model states): ") and lines[0].endswith(
        " (device_budget). Biggest consumers:"), lines
    assert any(line.startswith("  optimizer_states ") for line in lines), lines
    assert "Configs whose device memory would fit (model states by the formula, activations not measured yet: " \
           "they come on top):" in lines and not CJK.search(en[0]["error"]), lines
    zh_lines = zh[1]["error"].splitlines()
    assert len(zh_lines) == len(lines), (zh_lines, lines)
    assert zh_lines[0].startswith("rank 1：初始化（放置模型状态）时显存不足：需要 ") and "显存预算只有 1.00 MiB" in zh_lines[0]
    assert zh_lines[0].endswith("（device_budget）。占用最多的几项："), zh_lines
    consumers = [line for line in zh_lines if line.startswith("  ") and not line.startswith("  stage")]
    assert any(line.startswith("  优化器状态（optimizer_states）") for line in consumers), zh_lines
    assert len({i18n.width(line) for line in consumers}) == 1, consumers       # one column, CJK counted double
    assert "显存装得下的配置（模型状态按公式估算，激活值还没有测到：它们要另外加上）：" in zh_lines, zh_lines
    assert [line for line in zh_lines if line.startswith("  stage")] == [
        line.replace("rank 0", "rank 1") for line in lines if line.startswith("  stage")]   # config names stay


def _fp16_collapse():
    """Chapter 7's collapse, shorter: every step overflows, the scale halves 4 -> 2 -> 1, then stops."""
    import zerolab
    from zerolab.precision.loss_scaler import LossScaleAtMinimum
    from zerolab.models import MLP, mse_loss, regression_batches
    from zerolab.zero.reference import train_engine
    cfg = {"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2}, "fp16": {"enabled": True, "initial_scale_power": 2, "hysteresis": 1}}
    engine = zerolab.initialize(MLP(sizes=(16, 8, 4)), cfg)
    batches = [(x * 1e5, y) for x, y in regression_batches(5, 8, 16, 4)]
    with pytest.raises(LossScaleAtMinimum) as e:
        train_engine(engine, batches, mse_loss)
    engine.close()
    return {"error": str(e.value), "scale": e.value.scale, "iteration": e.value.iteration, "log": list(engine.log)}


def test_the_loss_scale_at_its_floor_in_the_editions_language(crew2):
    with i18n.using("zh"):
        zh = crew2.run(_fp16_collapse)[0]
    en = crew2.run(_fp16_collapse)[0]
    assert (zh["scale"], zh["iteration"]) == (en["scale"], en["iteration"]) == (1.0, 2)   # the same attributes
    assert en["log"] == ["overflow: skipping step, loss scale 4 -> 2", "overflow: skipping step, loss scale 2 -> 1"]
    assert en["error"].startswith("iteration 2: the gradients overflowed (inf/NaN) and the loss scale is already "
                                  "at its minimum, 1, so it cannot be lowered any further"), en
    assert en["error"].endswith("bf16 avoids loss scaling altogether.") and not CJK.search(en["error"])
    assert zh["log"] == ["溢出：跳过这一步，损失缩放值 4 -> 2", "溢出：跳过这一步，损失缩放值 2 -> 1"], zh["log"]
    assert zh["error"].startswith("第 2 次迭代：梯度溢出（inf/NaN），而损失缩放值已经在最小值 1，无法再降低"), zh
    assert "fp16.min_loss_scale" in zh["error"] and zh["error"].endswith("改用 bf16 则完全不需要损失缩放。"), zh


def _rank1_skips_block2(stage):
    """Chapter 7's divergent ranks: rank 1's forward skips block 2."""
    import zerolab
    from zerolab.models import TinyLM, lm_batches, lm_loss
    from zerolab.zero.reference import train_engine

    class SkippingLM(TinyLM):
        def forward(self, tokens):
            x = self.embed(tokens) + self.pos[: tokens.shape[1]]
            for i, b in enumerate(self.blocks):
                if not (i == 2 and zerolab.rank() == 1):
                    x = b(x)
            return self.head(self.ln_f(x)) / self.temperature
    model = SkippingLM(vocab=257, d=64, hidden=256, layers=4)
    cfg = {"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "ignore_unused_parameters": False,
                                 "stage3_param_persistence_threshold": 0}}
    engine = zerolab.initialize(model, cfg)
    try:
        train_engine(engine, lm_batches(1, 4, 16, 257, seed=0), lm_loss)
    except RuntimeError as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def test_ranks_on_different_paths_in_the_editions_language(crew2):
    """Stage 3: ModuleOrderError on every rank; stage 2 with ignore_unused_parameters false:
    UnusedParameterError naming the parameters. Chinese in a Chinese kernel, English as before."""
    with i18n.using("zh"):
        zh3, zh2 = crew2.run(_rank1_skips_block2, 3), crew2.run(_rank1_skips_block2, 2)
    en3, en2 = crew2.run(_rank1_skips_block2, 3), crew2.run(_rank1_skips_block2, 2)
    assert all(r.startswith("ModuleOrderError: ranks ran different modules") for r in en3), en3
    assert en3[0].endswith(". With ZeRO stage 3 every rank must run the same modules in the same order "
                           "(e.g. no rank-dependent branches, no forward on one rank only)."), en3
    assert all(r.startswith("ModuleOrderError: 各 rank ") and "运行的模块不同：rank 0 " in r for r in zh3), zh3
    assert zh3[0].endswith("。在 ZeRO stage 3 下，每个 rank 都必须以相同的顺序运行相同的模块（例如：不能有依 rank "
                           "而异的分支，不能只在某一个 rank 上做前向）。"), zh3
    assert "rank 0 reached 'blocks.2.ln.weight', rank 1 reached 'blocks.3.ln.weight'" in en3[0], en3
    assert "rank 0 到了 'blocks.2.ln.weight'，rank 1 到了 'blocks.3.ln.weight'" in zh3[0], zh3            # the names stay
    names = ", ".join(f"blocks.2.{m}.{w}" for m in ("ln", "up", "down") for w in ("weight", "bias"))
    assert en2[1].startswith("UnusedParameterError: trainable parameters got no gradient in this backward on "
                             f"rank(s) [1]; on this rank (rank 1): {names}. zero_optimization."), en2
    assert en2[0].startswith("UnusedParameterError: trainable parameters got no gradient in this backward on "
                             "rank(s) [1]. zero_optimization.ignore_unused_parameters is false, so this is an error "
                             "(DeepSpeed's rule); set it to true (the default)"), en2
    assert not CJK.search(en2[0] + en2[1] + en3[0] + en3[1])
    assert zh2[1].startswith("UnusedParameterError: 在 rank [1] 上，有可训练参数在这次反向里没有得到梯度；本 rank"
                             f"（rank 1）上是：{names}。zero_optimization."), zh2
    assert zh2[0].startswith("UnusedParameterError: 在 rank [1] 上，有可训练参数在这次反向里没有得到梯度。"
                             "zero_optimization.ignore_unused_parameters 为 false，所以这是一个错误"), zh2
    assert zh2[0].endswith("；或者冻结这个参数（requires_grad=False）。"), zh2


def test_the_engines_set_up_errors_in_the_editions_language(tmp_path):
    """A misused API or setting, met before training: no optimizer, an engine outside the ranks, a
    bad budget, an NVMe folder that is missing, hpZ's groups, qwZ's blocks, the memory formulas."""
    import zerolab
    from zerolab import memory
    from zerolab.memory import budget
    from zerolab.zeropp import hpz
    from zerolab.offload import nvme
    from zerolab.zero import optim
    from zerolab.zeropp import quant

    def errors():
        out = []
        for call in (lambda: optim.build_optimizer(None, None, [torch.zeros(1)]),
                     lambda: zerolab.initialize(torch.nn.Linear(2, 2), {"train_batch_size": 1}),
                     lambda: budget.parse_bytes("lots"),
                     lambda: nvme.check_nvme_path(tmp_path / "missing", 1, "parameter shards of every rank"),
                     lambda: nvme.check_nvme_path("", 1, "optimizer states"),
                     lambda: hpz.hpz_group_size(3, 4),
                     lambda: quant.qwz_groups(12),
                     lambda: memory.precision_bytes("fp8")):
            with pytest.raises((ValueError, RuntimeError)) as e:
                call()
            out.append(str(e.value))
        return out
    en = errors()
    with i18n.using("zh"):
        zh = errors()
    assert en[0] == "no optimizer: add an 'optimizer' block to the config (e.g. {'type': 'AdamW', 'params': " \
                    "{'lr': 1e-3}}) or pass optimizer="
    assert en[1].startswith("zerolab.initialize needs a torch.distributed process group: call it inside a function")
    assert en[3] == f"nvme_path {str(tmp_path / 'missing')!r} does not exist or is not a folder (create it first)"
    assert en[4] == "offload to nvme needs 'nvme_path' (a folder on a fast disk) for the optimizer states"
    assert en[5].endswith("(utils/groups.py, _ensure_divisibility: '4 is not divisible by 3'). Fix: a divisor of "
                          "4 (1, 2, 4), usually the ranks per node")
    assert not any(CJK.search(m) for m in en), en
    assert zh[0] == "没有优化器：请在配置里加上 'optimizer' 块（例如 {'type': 'AdamW', 'params': {'lr': 1e-3}}），" \
                    "或者传入 optimizer=", zh[0]
    assert zh[1].startswith("zerolab.initialize 需要一个 torch.distributed 进程组"), zh[1]
    assert zh[2] == "device_budget 'lots'：请用数字给出字节数，或写成 '2GB'、'1.5GiB' 这样的文字", zh[2]
    assert zh[3].endswith(" 不存在或不是文件夹（请先创建它）") and zh[4].startswith("卸载到 nvme 需要为优化器状态指定"), zh
    assert "'4 is not divisible by 3'" in zh[5] and zh[5].startswith("zero_optimization.zero_hpz_partition_size=3 "
                                                                     "不能整除 rank 总数 4"), zh[5]
    assert "'Quantized weight requires the number of weights be a multiple of 8'" in zh[6], zh[6]   # DeepSpeed's words
    assert all(CJK.search(m) for m in zh), zh
