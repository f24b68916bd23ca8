"""Right-sizing advice in words: the sentences the Lab notice, the usage pages and the API's ``message`` say.

Built from an advice's figures (:func:`.advice.figures`, or a stored advice row with the same attributes) in the
reader's language; the Lab panel builds the same sentences from the same figures (labextension/src/advice.ts).
"""

from __future__ import annotations

from decimal import Decimal

from jupyterhub_gpu.i18n import english_an, translator
from jupyterhub_gpu.money import Currency, from_micros


def _gb(mib: int) -> str:
    gb = Decimal(mib) / 1024
    shown = gb.quantize(Decimal("0.1"))
    return f"{shown:f}".removesuffix(".0")


def advice_text(row, currency: Currency, lang: str = "en") -> str:
    """The advice as sentences in ``lang``, from its figures (:func:`.advice.figures`, or a stored advice row: an object
    with these attributes): the Lab notice, the usage pages and the API's ``message`` say this, and the Lab
    panel builds the same sentences from the same figures (labextension/src/advice.ts).

    E.g. "Peak 3.1 GB of 40 GB GPU memory, busy 12% of the time. The 1× T4 profile (CN¥0.05/min instead of
    CN¥0.25/min) would very likely have served. This session would have cost CN¥6.00 instead of CN¥30.00."
    """
    _ = translator(lang)
    money = lambda micros: currency.format(from_micros(micros), locale=lang)  # noqa: E731
    rate = lambda micros: currency.format_rate(from_micros(micros), locale=lang)  # noqa: E731
    busy = round(row.busy_permille / 10)
    parts = []
    if row.gpus_used < row.gpu_count and (row.suggested_gpu_count or 0) < row.gpu_count:
        parts.append(
            _(
                "{used} of {count} GPUs did work (peak {peak} GB), busy {busy}% of the time.",
                used=row.gpus_used,
                count=row.gpu_count,
                peak=_gb(row.peak_memory_mib),
                busy=busy,
            )
        )
        count = row.suggested_gpu_count
        parts.append(_.plural("{count} GPU would have done.", "{count} GPUs would have done.", count, count=count))
    else:
        parts.append(
            _(
                "Peak {peak} GB of {total} GB GPU memory, busy {busy}% of the time.",
                peak=_gb(row.peak_memory_mib),
                total=_gb(row.memory_total_mib),
                busy=busy,
            )
        )
    values = dict(
        profile=row.suggested_display_name or row.suggested_profile,
        rate=rate(row.suggested_rate_micros or 0),
        current=rate(row.rate_micros),
    )
    share, model = getattr(row, "suggested_gpu_share", None), getattr(row, "suggested_gpu_model", None)
    if share and model:
        parts.append(
            share_sentence(share, model, row, values, money(row.counterfactual_micros), money(row.cost_micros), _)
        )
        return _.sentences(parts)
    parts.append(
        _("The {profile} profile ({rate}/min instead of {current}/min) would very likely have served.", **values)
        if row.confidence == "high"
        else _("The {profile} profile ({rate}/min instead of {current}/min) would likely have served.", **values)
    )
    costs = dict(would=money(row.counterfactual_micros), cost=money(row.cost_micros))
    parts.append(
        _("This session would have cost {would} instead of {cost}.", **costs)
        if row.final
        else _("So far this session would have cost {would} instead of {cost}.", **costs)
    )
    return _.sentences(parts)


def share_unit(count: int, model: str, _) -> str:
    """ "A quarter of a T4": one time-sliced share of ``count`` of a ``model`` GPU, at the start of a sentence."""
    an = english_an(model)
    if count == 2:
        return _("Half an {model}", model=model) if an else _("Half a {model}", model=model)
    if count == 3:
        return _("A third of an {model}", model=model) if an else _("A third of a {model}", model=model)
    if count == 4:
        return _("A quarter of an {model}", model=model) if an else _("A quarter of a {model}", model=model)
    if an:
        return _("A 1/{count} share of an {model}", count=count, model=model)
    return _("A 1/{count} share of a {model}", count=count, model=model)


def share_sentence(count: int, model: str, row, values: dict, would: str, cost: str, _) -> str:
    """The advice of a share (docs/admin.md, "Shared GPUs"): "A quarter of a T4 would very likely have served:
    ¥1.50 instead of ¥6.00 (the ¼ T4 profile, ¥0.0125/min instead of ¥0.05/min)."; "so far" while the session runs."""
    unit = share_unit(count, model, _)
    values = dict(values, unit=unit, would=would, cost=cost)
    if row.final:
        if row.confidence == "high":
            return _(
                "{unit} would very likely have served: {would} instead of {cost}"
                " (the {profile} profile, {rate}/min instead of {current}/min).",
                **values,
            )
        return _(
            "{unit} would likely have served: {would} instead of {cost}"
            " (the {profile} profile, {rate}/min instead of {current}/min).",
            **values,
        )
    if row.confidence == "high":
        return _(
            "{unit} would very likely have served so far: {would} instead of {cost}"
            " (the {profile} profile, {rate}/min instead of {current}/min).",
            **values,
        )
    return _(
        "{unit} would likely have served so far: {would} instead of {cost}"
        " (the {profile} profile, {rate}/min instead of {current}/min).",
        **values,
    )
