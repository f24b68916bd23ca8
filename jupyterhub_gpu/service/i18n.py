"""The usage pages' languages: English and Simplified Chinese.

Texts are written in English in the templates and in :mod:`.pages` as
``_("...")``; :data:`ZH_CN` maps each to its Chinese. The language comes from
the ``jupyterhub-gpu-lang`` cookie (set by the switch on every page, ``?lang=``)
or else from the browser's ``Accept-Language``. A text missing from the
catalogue is shown in English (the tests check that none is missing).
"""

from __future__ import annotations

LANGUAGES = ("en", "zh-CN")
LANGUAGE_NAMES = {"en": "English", "zh-CN": "简体中文"}
COOKIE = "jupyterhub-gpu-lang"

ZH_CN: dict[str, str] = {
    # navigation and common
    "GPU usage": "GPU 用量",
    "My usage": "我的用量",
    "My groups": "我的课程组",
    "Administration": "管理",
    "Hub home": "Hub 主页",
    "Language": "语言",
    "Simulated": "模拟",
    "Simulated GPUs": "模拟 GPU",
    "From": "从",
    "To": "到",
    "Show": "显示",
    "Download CSV": "下载 CSV",
    "None yet.": "暂无。",
    "Total": "合计",
    "running": "运行中",
    "Error": "错误",
    "Saved.": "已保存。",
    "Deleted.": "已删除。",
    "Back": "返回",
    "You may not see this page.": "您无权查看此页面。",
    "Bad request": "请求无效",
    # balances and budgets
    "Balance": "余额",
    "Budgets": "预算",
    "Budget": "预算",
    "No budget applies to you.": "您没有适用的预算。",
    "Spent this period": "本期已用",
    "Remaining": "剩余",
    "Limit": "额度",
    "Used": "已用",
    "Period": "周期",
    "Resets": "重置时间",
    "ended {day}": "已于 {day} 结束",
    "starts {day}": "{day} 开始",
    "Scope": "范围",
    "Subject": "对象",
    "user": "用户",
    "group": "组",
    "week": "周",
    "month": "月",
    "term": "学期",
    "money": "金额",
    "gpu_hours": "GPU 小时",
    "GPU-hours": "GPU 小时",
    "Unit": "单位",
    "Term start": "学期开始",
    "Term end": "学期结束",
    "Set budget": "设置预算",
    "Delete": "删除",
    "Set or change a budget": "设置或修改预算",
    "Updated": "更新时间",
    # sessions
    "Sessions": "会话",
    "Session": "会话",
    "Profile": "配置",
    "GPUs": "GPU",
    "Started": "开始",
    "Stopped": "结束",
    "Minutes": "分钟",
    "Cost": "费用",
    "Stop reason": "停止原因",
    "Server": "服务器",
    "Advice": "建议",
    "User": "用户",
    "Spend": "花费",
    "Spend in the window": "所选时段花费",
    "GPU-hours in the window": "所选时段 GPU 小时",
    "Daily spend and GPU-hours": "每日花费与 GPU 小时",
    "Spend and GPU-hours count on the day a session started (in {tz}).": "花费与 GPU 小时按会话开始日期统计（{tz}）。",
    "Every session": "全部会话",
    "stopped": "用户停止",
    "exited": "自行退出",
    "budget": "预算用尽",
    "gpu_idle": "GPU 空闲",
    "inactive": "无操作",
    "max_age": "超过最长时间",
    "reconciled": "对账关闭",
    # instructor
    "Group": "组",
    "Groups": "组",
    "Group total against its budget": "组总花费与预算",
    "No budget is set for this group.": "该组未设置预算。",
    "Top users": "用量最多的用户",
    "Idle time culled": "已回收的空闲时间",
    "Students of {group}": "{group} 的学生",
    "Group {group}": "组 {group}",
    "You are not an instructor of any group.": "您不是任何组的教师。",
    # admin
    "Spend by group": "按组花费",
    "Spend by user": "按用户花费",
    "Spend by profile": "按配置花费",
    "(no group)": "（无组）",
    "Utilization": "利用率",
    "Billed GPU-hours": "计费 GPU 小时",
    "Busy GPU-hours": "繁忙 GPU 小时",
    "Idle GPU-hours": "空闲 GPU 小时",
    "Unsampled GPU-hours": "无采样 GPU 小时",
    "Busy share of billed": "繁忙占计费比例",
    "Busy: sampled minutes with mean GPU utilization of {pct}% or more, or a busy kernel.": (
        "繁忙：平均 GPU 利用率不低于 {pct}% 或有内核在运行的采样分钟。"
    ),
    "What culling saved": "空闲回收节省",
    "Estimated against keeping every culled server running until its user came back (at most {hours} hours).": (
        "估算基准：被回收的服务器一直运行到用户回来为止（最多 {hours} 小时）。"
    ),
    "Reason": "原因",
    "GPU-hours saved": "节省 GPU 小时",
    "Money saved": "节省金额",
    "Budget stops": "预算停止",
    "Profiles, prices and access": "配置、价格与访问权限",
    "Price per GPU-hour": "每 GPU 小时价格",
    "Price per hour": "每小时价格",
    "Rate per minute": "每分钟费率",
    "Who may use it": "可用人员",
    "everyone": "所有人",
    "as configured": "按配置",
    "only these groups": "仅以下组",
    "Save": "保存",
    "Reset to configuration": "恢复配置值",
    "Leave a price empty to keep the configured one.": "价格留空则保持配置值。",
    "edited by {who}": "由 {who} 修改",
    "Right-sizing": "规格建议",
    "Right-sizing advice appears here once it is computed.": "规格建议计算完成后显示在此处。",
    "Following the advice would have saved {amount} on {advised} of {judged} judged sessions.": (
        "按建议选择配置，可在 {judged} 个已评估会话中的 {advised} 个上节省 {amount}。"
    ),
    "Advised": "已建议",
    "Potential saving": "可节省",
    "larger than needed": "超出所需",
    "You can read but not change budgets, prices and access.": "您可以查看但不能修改预算、价格和访问权限。",
    "All users": "所有用户",
    # errors from forms
    "The form has expired or did not come from this page; reload the page and try again.": (
        "表单已过期或并非来自本页面，请刷新页面后重试。"
    ),
    "No such profile: {slug}": "没有此配置：{slug}",
    "This needs the {scope} scope.": "此操作需要 {scope} 权限。",
}


#: English display texts of codes the pages pass through ``_()`` (stop reasons, units).
EN: dict[str, str] = {
    "stopped": "stopped by user",
    "exited": "exited",
    "budget": "budget",
    "gpu_idle": "GPU idle",
    "inactive": "inactive",
    "max_age": "maximum age",
    "reconciled": "reconciled",
    "gpu_hours": "GPU-hours",
}


def negotiate(accept_language: str | None, cookie: str | None = None) -> str:
    """The page language: the cookie's choice, else the browser's first supported language, else English."""
    if cookie in LANGUAGES:
        return cookie
    choices = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if tag and q > 0:
            choices.append((-q, position, tag.lower()))
    for _q, _pos, tag in sorted(choices):
        if tag.startswith("zh"):
            return "zh-CN"
        if tag.startswith("en") or tag == "*":
            return "en"
    return "en"


def translator(lang: str):
    """``_(text, **values)`` for ``lang``: the catalogue's text (or the English), formatted."""
    catalogue = ZH_CN if lang == "zh-CN" else EN

    def _(text: str, **values) -> str:
        out = catalogue.get(text, text)
        return out.format(**values) if values else out

    return _
