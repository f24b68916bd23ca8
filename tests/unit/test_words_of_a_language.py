"""What a language decides is in its catalog, not in the code (docs/translating.md, "Adding a language").

How a list and sentences run together, a day's pattern, a count's form: the catalog's entries, read through the
translator, so that a third language needs a catalog and no code. Which article English puts before a name is
English grammar: one rule (``i18n.english_an``), used where English texts come in pairs.
"""

from __future__ import annotations

import ast
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu import i18n
from jupyterhub_gpu.i18n import english_an, translator
from jupyterhub_gpu.scheduler.booking_words import bookings_words, limit_text
from jupyterhub_gpu.scheduler.bookings import (
    HOLD,
    POOL_SHARE,
    WEEKLY,
    LimitProblem,
    ReservationError,
    booking_problems,
    check_reservation,
)
from jupyterhub_gpu.scheduler.snapshot import Reservation
from jupyterhub_gpu.scheduler.texts import Gpus
from jupyterhub_gpu.scheduler.words import stop_notice_words, stop_subject_words
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.domain.schedule import PREEMPTED, RESERVED, order_message
from jupyterhub_gpu.spawners.form import reserved_note

PACKAGE = Path(i18n.__file__).resolve().parent
SHANGHAI = ZoneInfo("Asia/Shanghai")
#: the language codes of the catalogs other than English: no code compares a language with one of them
TRANSLATED = {code for code in i18n.LANGUAGES if code != i18n.SOURCE_LANGUAGE}


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path.relative_to(PACKAGE), ast.parse(path.read_text())


def test_no_code_asks_which_translated_language_it_writes():
    """A translated language's words are its catalog's: no ``lang == "zh-CN"``, no ``lang.startswith("zh")``,
    no Chinese separator in the code."""
    found = []
    prefixes = {code.split("-")[0] for code in TRANSLATED}
    for name, tree in _sources():
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Constant) and s.value in TRANSLATED for s in sides):
                    found.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "startswith":
                if any(isinstance(a, ast.Constant) and a.value in prefixes for a in node.args):
                    found.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.Constant) and id(node) not in docstrings:
                if isinstance(node.value, str) and any(c in node.value for c in "、，；。"):
                    found.append(f"{name}:{node.lineno}")
    assert not found, found


def test_lists_and_sentences_run_together_as_the_catalog_says():
    en, zh = translator("en"), translator("zh-CN")
    assert en.listing(["4 T4s", "2 A100s"]) == "4 T4s, 2 A100s"
    assert zh.listing(["4 块 T4", "2 块 A100"]) == "4 块 T4、2 块 A100"
    assert en.sentences(["It stops.", "Save your work."]) == "It stops. Save your work."
    assert zh.sentences(["它将停止。", "请保存。"]) == "它将停止。请保存。"
    assert zh.listing([]) == "" and zh.listing(["one"]) == "one"
    assert en.listing(["{items}", "{0}"]) == "{items}, {0}"  # a part is a value, never read as a text


@pytest.mark.parametrize(
    "count, during, en, zh",
    [
        (1, False, "1 whole GPU reserved for CS231N from 14:00", "1 块整卡自 14:00 起为 CS231N 预留"),
        (2, False, "2 whole GPUs reserved for CS231N from 14:00", "2 块整卡自 14:00 起为 CS231N 预留"),
        (1, True, "1 whole GPU reserved for CS231N until 16:00", "1 块整卡为 CS231N 预留至 16:00"),
        (3, True, "3 whole GPUs reserved for CS231N until 16:00", "3 块整卡为 CS231N 预留至 16:00"),
    ],
)
def test_a_share_line_counts_whole_gpus_by_the_catalog_s_plural(count, during, en, zh):
    start = datetime(2026, 12, 8, 14, 0, tzinfo=SHANGHAI)
    booking = Reservation("1", "cs231n", "T4", count, start, start + timedelta(hours=2), label="CS231N")
    now = start + timedelta(minutes=30) if during else start - timedelta(hours=1)
    assert reserved_note([booking], "T4", now, SHANGHAI, share=4) == en
    assert reserved_note([booking], "T4", now, SHANGHAI, "zh-CN", share=4) == zh


def test_the_group_s_other_bookings_are_one_plural_entry():
    assert bookings_words(("Lab 1",)) == "its reservation Lab 1"
    assert bookings_words(("Lab 1", "Lab 2")) == "its reservations Lab 1, Lab 2"
    assert bookings_words(("Lab 1", "Lab 2"), "zh-CN") == "其预留 Lab 1、Lab 2"


@pytest.mark.parametrize(
    "name, an",
    [
        ("A100", True), ("H100", True), ("L4", True), ("MI300X", True), ("RTX 4090", True), ("80GB card", True),
        ("T4", False), ("V100", False), ("Tesla T4", False), ("Simulated T4", False), ("Ampere", True), ("", False),
    ],
)  # fmt: skip
def test_one_rule_says_a_or_an(name, an):
    assert english_an(name) is an


def test_the_article_rule_has_one_home():
    homes = [name for name, tree in _sources() if "AEFHILMNORSX" in ast.unparse(tree)]
    assert homes == [Path("i18n.py")], homes


def test_every_english_pair_of_a_model_follows_the_one_rule():
    """The texts that come in "a"/"an" pairs choose by english_an: a simulated T4 is "a Simulated T4"."""
    order = SimpleNamespace(kind=PREEMPTED, reason_key="preempt", values={}, stop_at=datetime(2026, 12, 8, 14, 2,
                            tzinfo=SHANGHAI), server_name="", user="ann", session_id="s1",
                            decided_at=datetime(2026, 12, 8, 14, 0, tzinfo=SHANGHAI))  # fmt: skip
    now = datetime(2026, 12, 8, 13, 55, tzinfo=SHANGHAI)
    session = SimpleNamespace(resume=True)
    for model, article in (("Simulated T4", "a"), ("A100", "an"), ("T4", "a")):
        text = order_message(order, session, SHANGHAI, now, AlertSettings(), model).text
        assert f"start again when {article} {model} is free." in text, text


def test_a_stop_s_subject_is_the_scheduler_s_words():
    """A preemption's and a reservation's end's subject are worded where their notice and reason are."""
    stop = datetime(2026, 12, 8, 14, 2, tzinfo=SHANGHAI)
    now = stop - timedelta(minutes=5)
    assert stop_subject_words(True, "gpu1", stop, "en", SHANGHAI, now) == (
        "[GPU] Your server gpu1 will be stopped at 14:02 to free its GPU"
    )
    assert stop_subject_words(False, "gpu1", stop, "zh-CN", SHANGHAI, now) == (
        "[GPU] 您的服务器 gpu1 将于 14:02 停止：GPU 已为课程预留"
    )
    order = SimpleNamespace(kind=RESERVED, reason_key="end", values={}, stop_at=stop, server_name="gpu1",
                            user="ann", session_id="s1", decided_at=now)  # fmt: skip
    message = order_message(order, SimpleNamespace(resume=False), SHANGHAI, now, AlertSettings(), "T4", lang="zh-CN")
    assert (
        message.subject == message.payload["title"] == stop_subject_words(False, "gpu1", stop, "zh-CN", SHANGHAI, now)
    )
    assert message.text == stop_notice_words(False, "end", {}, stop, "zh-CN", SHANGHAI, now, "T4")


# -- a booking refused, in the reader's language ------------------------------------------------------------------

T = datetime(2026, 9, 8, 14, 0, tzinfo=SHANGHAI)


def booking(rid="b", group="ml101", count=2, start=T, hours=2, model="T4", label="ML101") -> Reservation:
    return Reservation(rid, group, model, count, start, start + timedelta(hours=hours), label=label)


def test_a_booking_s_problems_are_keys_and_values_worded_in_each_language():
    pool, groups = {"T4": 4, "A100": 2}, {"ml101", "cs231n"}
    assert booking_problems(booking(count=5), [], pool, groups) == [
        ("refuse.count", {"gpus": Gpus(5, "T4"), "total": 4})
    ]
    with pytest.raises(ReservationError) as refused:
        check_reservation(booking(rid="c", group="cs231n", count=3), [booking()], pool, groups)
    english = "on Tue 8 Sep 14:00–16:00, 5 T4s would be reserved but the pool has 4 (2 already reserved for ML101)"
    assert str(refused.value) == refused.value.words("en") == english
    assert (
        refused.value.words("zh-CN")
        == "在 9月8日 14:00–16:00 将有 5 块 T4 被预留，但资源池只有 4 块（已有 2 块预留给 ML101）"
    )
    with pytest.raises(ReservationError) as refused:
        check_reservation(booking(model="H100", group="nobody"), [], pool, groups)
    assert str(refused.value) == "the pool has no H100 GPUs (it has: A100, T4); there is no group named 'nobody'"
    assert refused.value.words("zh-CN") == "资源池没有 H100 GPU（它有：A100、T4）；没有名为 'nobody' 的组"


def test_a_limit_problem_is_worded_in_each_language():
    start = datetime(2026, 12, 8, 14, 0, tzinfo=SHANGHAI)
    hold = LimitProblem(HOLD, "cs231n", "T4", start, start + timedelta(hours=5), Fraction(5), Fraction(4), True,
                        single_window=True, more=2)  # fmt: skip
    assert limit_text(hold, SHANGHAI) == (
        "its window on Tue 8 Dec 2026 14:00–19:00 lasts 5 hours (and 2 more like it later), and an instructor may"
        " book at most 4 hours at a time (c.Scheduling.reservation_max_hours); an administrator can book a longer one"
    )
    assert limit_text(hold, SHANGHAI, "zh-CN") == (
        "其 2026年12月8日 周二 14:00–19:00 的时段长 5 小时（之后还有 2 处同样的情况），"
        "而讲师一次最多只能预订 4 小时（c.Scheduling.reservation_max_hours）；管理员可以预订更长的时段"
    )  # fmt: skip
    monday = datetime(2026, 12, 7, 0, 0, tzinfo=SHANGHAI)
    week = LimitProblem(WEEKLY, "cs231n", "", monday, monday + timedelta(days=7), Fraction(24), Fraction(20), False,
                        ("Lab 1",), mine=Fraction(8))  # fmt: skip
    assert limit_text(week, SHANGHAI) == (
        "in the week of Mon 7 Dec 2026 (Monday to Sunday, Asia/Shanghai) cs231n would have 24 GPU-hours booked (8 by"
        " this booking, 16 by its reservation Lab 1), and an instructor may book at most 20 GPU-hours a week for a"
        " group (c.Scheduling.reservation_max_gpu_hours_per_week); an administrator can book more"
    )
    assert "2026年12月7日 周一 所在的一周" in limit_text(week, SHANGHAI, "zh-CN")
    pool = LimitProblem(POOL_SHARE, "cs231n", "T4", start, start + timedelta(days=1), Fraction(3), Fraction(2),
                        False, ("Lab 1", "Lab 2"), pool=4, share=Fraction(1, 2))  # fmt: skip
    assert limit_text(pool, SHANGHAI).startswith(
        "on from Tue 8 Dec 2026 14:00 to Wed 9 Dec 2026 14:00, cs231n would hold 3 of the pool's 4 T4 GPUs at once"
        " (with its reservations Lab 1, Lab 2)"
    )
    assert "从 2026年12月8日 周二 14:00 到 2026年12月9日 周三 14:00" in limit_text(pool, SHANGHAI, "zh-CN")
