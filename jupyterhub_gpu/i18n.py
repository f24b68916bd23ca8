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
    "orphaned": "中断的启动",
    "job_finished": "作业完成",
    "job_time_limit": "作业超时",
    "job_cancelled": "作业取消",
    "stop_when_done": "完成后停止",
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
    # refused callers (service/web/auth.py: TOKEN_REFUSED, TOKEN_LACKS_SCOPE, LOGIN_LACKS_SCOPE)
    "The token was refused: JupyterHub does not know it (mistyped, expired or revoked). Make a new one on the"
    " hub's token page ({url}) and send it as 'Authorization: token ...'.": (
        "令牌被拒绝：JupyterHub 不认识它（输错、已过期或已撤销）。请在 JupyterHub 的令牌页面（{url}）"
        "创建一个新令牌，并以 'Authorization: token ...' 发送。"
    ),
    "This needs the {needs} scope, and the token sent does not carry it. A token holds the scopes chosen when it"
    " was made (on the hub's token page: none chosen means all of its owner's), and its owner's role must grant"
    " them (c.JupyterHub.load_roles, docs/service-api.md).": (
        "此操作需要 {needs} 权限，而所发送的令牌不包含它。令牌只包含创建时选择的权限（在 JupyterHub 的令牌页面上："
        "不选择即为其所有者的全部权限），且其所有者的角色必须授予这些权限"
        "（c.JupyterHub.load_roles，见 docs/service-api.md）。"
    ),
    "This needs the {needs} scope, and your login to the gpu service does not carry it. If your JupyterHub role"
    " grants it, it is held but not granted to the service's OAuth client: a browser gets only the scopes listed"
    " in the gpu service's oauth_client_allowed_scopes. The administrator adds them there (c.JupyterHub.services,"
    ' the "gpu" entry: "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES); docs/service.md) and restarts the'
    " hub; then log out of JupyterHub and in again.": (
        "此操作需要 {needs} 权限，而您登录 gpu 服务时获得的授权中没有它。如果您的 JupyterHub 角色授予了该权限，"
        "说明您持有它，但它没有授予该服务的 OAuth 客户端：浏览器只能获得 gpu 服务的 oauth_client_allowed_scopes"
        ' 中列出的权限。请管理员把它加入该设置（c.JupyterHub.services 中的 "gpu" 一项："oauth_client_allowed_scopes":'
        " sorted(CUSTOM_SCOPES)；见 docs/service.md）并重启 JupyterHub，然后退出 JupyterHub 再重新登录。"
    ),
}


# alert channels (the channels sections of the pages, the test message)
ZH_CN.update(
    {
        "budget warning": "预算提醒",
        "budget almost used up (95%)": "预算即将用完（95%）",
        "budget used up (100%)": "预算已用完（100%）",
        "idle warnings": "闲置提醒",
        "preemption": "抢占",
        "finished jobs": "已结束的作业",
        "weekly right-sizing digest": "每周规格建议摘要",
        "nothing": "无",
        "Test message from the GPU service": "GPU 服务的测试消息",
        "This channel ({target}) gets: {events}.": "此渠道（{target}）接收：{events}。",
        "Notifications": "通知",
        "Alert channels": "告警渠道",
        "The admins' channels": "管理员的渠道",
        "Every user": "每个用户",
        "Notices go to JupyterLab, and to each channel here that wants their event. A channel is an Apprise URL;"
        " its secret parts are never shown again.": (
            "通知会显示在 JupyterLab 中，并发送到这里订阅了该事件的每个渠道。"
            "渠道是一个 Apprise URL；其中的密钥部分保存后不再显示。"
        ),
        "Service": "服务",
        "Target": "目标",
        "Events": "事件",
        "configuration file": "配置文件",
        "Send a test message": "发送测试消息",
        "Remove": "移除",
        "No channels yet: notices appear in JupyterLab only.": "尚无渠道：通知只显示在 JupyterLab 中。",
        "Add a channel": "添加渠道",
        "For": "用于",
        "the admins": "管理员",
        "a group": "一个课程组",
        "Group name": "组名",
        "Apprise URL": "Apprise URL",
        "Services you may add: {schemes}": "您可以添加的服务：{schemes}",
        "Add": "添加",
        "Channel added.": "已添加渠道。",
        "Channel removed.": "已移除渠道。",
        "Test message sent.": "测试消息已发送。",
        "Choose at least one event.": "请至少选择一个事件。",
    }
)

# -- the spawn form, its progress messages and its refusals (the hub side)
ZH_CN.update(
    {
        # (spawn-form texts go here)
        # the form (spawners/templates/options_form.html, spawners/form.py)
        "Simulated GPUs.": "模拟 GPU。",
        "This hub runs over a simulated GPU inventory (a demo or a test): no real GPU is attached to the servers"
        " it starts.": "此 Hub 使用模拟的 GPU（演示或测试）：它启动的服务器没有连接真实的 GPU。",
        "Choose a GPU profile": "选择 GPU 配置",
        "Which group's budget pays": "由哪个组的预算支付",
        "The first group the profile is allowed for": "该配置允许的第一个组",
        "A session draws from exactly one group's budget.": "一个会话只从一个组的预算中扣费。",
        "Billing is per started minute, from the moment the server starts until it stops.": (
            "按开始的分钟计费，从服务器启动时起，到它停止时为止。"
        ),
        "Simulated {model}": "模拟 {model}",
        "free": "免费",
        "{rate}/min": "{rate}/分钟",
        "CPU only — {price}": "仅 CPU — {price}",
        "free GPUs unknown right now": "暂时无法获知空闲 GPU 数量",
        "no such GPU on this host": "本机没有这种 GPU",
        "no such GPU in the cluster": "集群中没有这种 GPU",
        "preemptible": "可抢占",
        "may be interrupted, your work is checkpointed": "可能被中断，您的工作会保存检查点",
        "{count} reserved for {label} until {time}": "{count} 块为 {label} 预留至 {time}",
        "{count} reserved for {label} from {time}": "{count} 块自 {time} 起为 {label} 预留",
        # a share profile's line counts shares: a booking holds whole GPUs (docs/scheduling.md#units)
        "1 whole GPU reserved for {label} until {time}": "1 块整卡为 {label} 预留至 {time}",
        "1 whole GPU reserved for {label} from {time}": "1 块整卡自 {time} 起为 {label} 预留",
        "{count} whole GPUs reserved for {label} until {time}": "{count} 块整卡为 {label} 预留至 {time}",
        "{count} whole GPUs reserved for {label} from {time}": "{count} 块整卡自 {time} 起为 {label} 预留",
        "If a preemptible server is interrupted, put it back in the queue and start it again when a GPU is free": (
            "可抢占的服务器被中断后，将其重新排入队列，在有空闲 GPU 时再次启动"
        ),
        "none free": "无空闲",
        "none free ({waiting} waiting)": "无空闲（{waiting} 人排队）",
        "{free} of {total} free": "空闲 {free} 块，共 {total} 块",
        "{free} of {total} free ({waiting} waiting)": "空闲 {free} 块，共 {total} 块（{waiting} 人排队）",
        # progress events (the spawn pending page)
        "Waiting for a free {model} — position {position} of {length}": (
            "正在等待空闲的 {model} — 排队中：第 {position} 位，共 {length} 位"
        ),
        "Waiting for {count} free {model} GPUs — position {position} of {length}": (
            "正在等待 {count} 块空闲的 {model} GPU — 排队中：第 {position} 位，共 {length} 位"
        ),
        "The hub has just started and is restoring its GPU assignments; your request waits for it": (
            "Hub 刚刚启动，正在恢复 GPU 分配；您的请求正在等待其完成"
        ),
        "Assigned {devices}; starting {profile} at {rate}": "已分配 {devices}；正在启动 {profile}，费率 {rate}",
        "Assigned no GPU; starting {profile} at {rate}": "未分配 GPU；正在启动 {profile}，费率 {rate}",
        "Asking Kubernetes for {count}× {resource} on a node with {products}": (
            "正在向 Kubernetes 申请 {count}× {resource}（节点型号：{products}）"
        ),
        "Asking Kubernetes for {count}× {resource}": "正在向 Kubernetes 申请 {count}× {resource}",
        "Asking Kubernetes for a CPU-only pod": "正在向 Kubernetes 申请一个仅 CPU 的 Pod",
        # refusals of the form and of the REST API's options (spawners/profiles.py)
        "Unexpected form field(s): {fields}. Nothing was started.": "意外的表单字段：{fields}。未启动任何服务器。",
        "Choose a profile. Nothing was started.": "请选择一个配置。未启动任何服务器。",
        "The previous start of this server is still being cancelled; try again in a moment.": (
            "此服务器上一次的启动仍在取消中，请稍后再试。"
        ),
        "A link cannot start a server: choose a profile and press Start.": (
            "链接不能启动服务器：请选择一个配置，然后点击“启动”。"
        ),
        "Choose exactly one profile. Nothing was started.": "请只选择一个配置。未启动任何服务器。",
        "Choose at most one group to pay. Nothing was started.": "最多只能选择一个付费的组。未启动任何服务器。",
        'Spawn options must be a JSON object such as {"profile": "t4"}.': (
            '启动选项必须是一个 JSON 对象，例如 {"profile": "t4"}。'
        ),
        "Unexpected option(s): {options}. Only 'profile', 'pool' and 'resume' may be given.": (
            "意外的选项：{options}。只能提供 'profile'、'pool' 和 'resume'。"
        ),
        "'resume' must be the form's checkbox. Nothing was started.": (
            "'resume' 必须是表单中的复选框。未启动任何服务器。"
        ),
        "'resume' must be true or false, got {value}.": "'resume' 必须为 true 或 false，收到的是 {value}。",
        "'resume' is for preemptible profiles; {profile} is not one. Nothing was started.": (
            "'resume' 仅适用于可抢占配置；{profile} 不是。未启动任何服务器。"
        ),
        "No profile is available to you. Ask your instructor or administrator for access.": (
            "您没有可用的配置。请向您的教师或管理员申请权限。"
        ),
        "'profile' must be a profile name, got {value}.": "'profile' 必须是配置名称，收到的是 {value}。",
        "You may not use the profile {slug}: it is reserved for other groups.": (
            "您不能使用配置 {slug}：它仅供其他组使用。"
        ),
        "Unknown profile {slug}.": "未知的配置 {slug}。",
        "'pool' must be the name of one of your groups, got {value}.": (
            "'pool' 必须是您所在的某个组的名称，收到的是 {value}。"
        ),
        "The group {group} cannot pay for {profile}: choose one of {choices}. Nothing was started.": (
            "组 {group} 不能为 {profile} 付费：请从 {choices} 中选择一个。未启动任何服务器。"
        ),
        "The group {group} cannot pay for {profile}. Nothing was started.": (
            "组 {group} 不能为 {profile} 付费。未启动任何服务器。"
        ),
        "'job_id' is only for the job's own server job-<id>, not {server}.": (
            "'job_id' 只能用于作业自己的服务器 job-<id>，不能用于 {server}。"
        ),
        "'job_id' is only for the job's own server job-<id>, not the default server.": (
            "'job_id' 只能用于作业自己的服务器 job-<id>，不能用于默认服务器。"
        ),
        "Server names beginning with {prefix} are reserved for notebook jobs, which the gpu service starts"
        " (POST /services/gpu/api/v1/jobs). Choose another name. Nothing was started.": (
            "以 {prefix} 开头的服务器名称保留给笔记本作业，这些作业由 gpu 服务启动"
            "（POST /services/gpu/api/v1/jobs）。请换一个名称。未启动任何服务器。"
        ),
        # the budget check (billing.spawn_refusal, spawners/budget.py)
        "Budget used up: {used} of {limit} ({whose}) spent in {period}; {reset}.": (
            "预算已用完：{period}已花费 {used}，额度 {limit}（{whose}）；{reset}。"
        ),
        "Budget too low for {minutes} minutes of this profile: {used} of {limit} ({whose}) spent in {period};"
        " {reset}.": "预算不足以支付此配置的 {minutes} 分钟：{period}已花费 {used}，额度 {limit}（{whose}）；{reset}。",
        "Budget too low for {minutes} minutes of this profile: {used} of {limit} ({whose}) spent, and {held} held"
        " for the first {minutes} minutes of its servers that are starting or started less than {minutes} minutes"
        " ago. Stop one of them, or try again in a few minutes.": (
            "预算不足以支付此配置的 {minutes} 分钟：已花费 {used}，额度 {limit}（{whose}），另有 {held}"
            " 预留给正在启动或启动不到 {minutes} 分钟的服务器的前 {minutes} 分钟。请停止其中一台，或几分钟后再试。"
        ),
        "your budget": "您的预算",
        "the {group} group's budget": "{group} 组的预算",
        "the week of {day}": "{day}那一周",
        "this term": "本学期",
        "resets on {day}": "{day}重置",
        "the term ends on {day}": "学期于{day}结束",
        "{hours} GPU-hours": "{hours} GPU 小时",
        # the queue and the allocators (spawners/assign/)
        "No {model} became free within {limit}; nothing was started. Try again later or choose another profile.": (
            "{limit}内没有空闲的 {model}；未启动任何服务器。请稍后再试，或选择其他配置。"
        ),
        "No {model} became free in the cluster within {limit}; nothing was started. Try again later or choose"
        " another profile.": "{limit}内集群中没有空闲的 {model}；未启动任何服务器。请稍后再试，或选择其他配置。",
        "the time limit": "时限",
        "{n} minutes": "{n} 分钟",
        "{n} seconds": "{n} 秒",
        "This profile needs {count}× {model} but this host has {total}. Ask your administrator to fix the profile.": (
            "此配置需要 {count}× {model}，但本机只有 {total} 块。请让管理员修正该配置。"
        ),
        "This profile needs {count}× {model} on one node, but no node has {count}× {model}. Ask your administrator"
        " to fix the profile.": (
            "此配置需要同一节点上的 {count}× {model}，但没有节点有 {count}× {model}。请让管理员修正该配置。"
        ),
        "This profile needs {count}× {model} on one node, but the cluster has no {model}. Ask your administrator to"
        " fix the profile.": ("此配置需要同一节点上的 {count}× {model}，但集群中没有 {model}。请让管理员修正该配置。"),
        "The cluster's GPUs cannot be read right now; nothing was started. Try again in a minute, or tell your"
        " administrator.": "暂时无法读取集群的 GPU；未启动任何服务器。请一分钟后再试，或告知您的管理员。",
        "{key} is already waiting for a GPU": "{key} 已在等待 GPU",
        "{key} was stopped while it waited for a GPU; nothing was started.": (
            "{key} 在等待 GPU 时被停止；未启动任何服务器。"
        ),
        # other refusals of a spawn (the mixin, Docker, Kubernetes)
        "The server was stopped while it was starting; nothing was started.": (
            "服务器在启动过程中被停止；未启动任何服务器。"
        ),
        "The GPU profiles are misconfigured; please tell your administrator.": "GPU 配置有误；请告知您的管理员。",
        "Image {image} is not allowed": "不允许使用镜像 {image}",
        "This profile's image is not available on the server yet; the admin has been told.": (
            "此配置的镜像在服务器上尚不可用；已通知管理员。"
        ),
        "The lab's container network is not set up safely; please tell your administrator.": (
            "实验室的容器网络设置不安全；请告知您的管理员。"
        ),
        "The lab's GPU runtime is not set up on this server yet, so GPU profiles cannot start; the admin has been"
        " told. A profile without a GPU can start meanwhile.": (
            "此服务器上实验室的 GPU 运行环境尚未配置，GPU 配置暂时无法启动；已通知管理员。"
            "在此期间可以启动不带 GPU 的配置。"
        ),
        "The server's pod could not be built; please tell your administrator.": (
            "无法构建服务器的 Pod；请告知您的管理员。"
        ),
    }
)

# -- the hub's own pages (login, home, spawn, spawn pending, errors: the package's templates)
ZH_CN.update(
    {
        # (hub-pages texts go here)
        # the frame (jupyterhub_gpu/hubpages/templates/page.html)
        "Home": "主页",
        "Token": "令牌",
        "Admin": "管理",
        "Services": "服务",
        "Logout": "退出登录",
        "Login": "登录",
        "Toggle dark mode": "切换深色模式",
        # login
        "Sign in": "登录",
        "Sign in with {service}": "使用 {service} 登录",
        "Username:": "用户名：",
        "Password:": "密码：",
        "Show password": "显示密码",
        "Hide password": "隐藏密码",
        "Invalid username or password": "用户名或密码错误",
        "Login form invalid or expired. Try again.": "登录表单无效或已过期，请重试。",
        "Warning: JupyterHub seems to be served over an unsecured HTTP connection."
        " We strongly recommend enabling HTTPS for JupyterHub.": (
            "警告：JupyterHub 似乎通过不安全的 HTTP 连接提供服务。强烈建议为 JupyterHub 启用 HTTPS。"
        ),
        "By logging into the platform you accept the {terms}.": "登录本平台即表示您接受{terms}。",
        "terms and conditions": "条款和条件",
        "Successfully logged out.": "已成功退出登录。",
        # home
        "JupyterHub home page": "JupyterHub 主页",
        "Start My Server": "启动我的服务器",
        "Stop My Server": "停止我的服务器",
        "My Server": "我的服务器",
        "Your server is stopping": "您的服务器正在停止",
        "Start your default server": "启动您的默认服务器",
        "Named Servers": "命名服务器",
        "In addition to your default server, you may have {limit} more servers with names,"
        " so that more than one server runs at the same time.": (
            "除默认服务器外，您还可以再有 {limit} 个命名服务器，以便同时运行多个服务器。"
        ),
        "In addition to your default server, you may have more servers with names,"
        " so that more than one server runs at the same time.": (
            "除默认服务器外，您还可以有其他命名服务器，以便同时运行多个服务器。"
        ),
        "JupyterHub 6 has {restrictions}. Consider migrating named servers:": (
            "JupyterHub 6 对{restrictions}。请考虑迁移以下命名服务器："
        ),
        "new restrictions on server names": "服务器名称有新的限制",
        "Server name": "服务器名称",
        "server name": "服务器名称",
        "name-your-server": "为服务器命名",
        "URL": "URL",
        "Last activity": "最近活动",
        "Actions": "操作",
        "Add New Server": "添加新服务器",
        "Never": "从未",
        "stop": "停止",
        "start": "启动",
        "delete": "删除",
        # spawn (the profile form inside it is the spawn form's)
        "Server Options": "服务器选项",
        "Spawning server for {name}": "正在为 {name} 启动服务器",
        "Error: {message}": "错误：{message}",
        "Start": "启动",
        # spawn pending, and the progress messages JupyterHub itself sends
        "Your server is starting up.": "您的服务器正在启动。",
        "You will be redirected automatically when it's ready for you.": "服务器就绪后，页面将自动跳转。",
        "Complete": "已完成",
        "Event log": "事件日志",
        "Stop Server": "停止服务器",
        "Stopping...": "正在停止……",
        "Stopping server...": "正在停止服务器……",
        "Server stopped successfully!": "服务器已停止！",
        "Error stopping server": "停止服务器时出错",
        "Server requested": "已请求服务器",
        "Spawning server...": "正在启动服务器……",
        "Spawn failed": "启动失败",
        "Spawn cancelled": "启动已取消",
        "Spawn failed: {detail}": "启动失败：{detail}",
        "Server ready at {detail}": "服务器已就绪：{detail}",
        # not running, stop pending
        "Server not running": "服务器未运行",
        "The latest attempt to start your server {server} has failed.": "最近一次启动您的服务器 {server} 失败了。",
        "Would you like to retry starting it?": "要重新启动吗？",
        "Your server {server} is not running.": "您的服务器 {server} 未运行。",
        "It will be restarted automatically. If you are not redirected in a few seconds,"
        " click below to launch your server.": "它将自动重新启动。如果几秒钟后没有跳转，请点击下面的按钮启动服务器。",
        "Would you like to start it?": "要启动它吗？",
        "Launch Server {server}": "启动服务器 {server}",
        "Relaunch Server {server}": "重新启动服务器 {server}",
        "Your server is stopping.": "您的服务器正在停止。",
        "You will be able to start it again once it has finished stopping.": "服务器停止后，您可以再次启动它。",
        "refresh": "刷新",
        # the error page: the standard reasons of the status codes a student may meet
        "Bad Request": "请求无效",
        "Unauthorized": "未认证",
        "Forbidden": "禁止访问",
        "Not Found": "未找到",
        "Method Not Allowed": "不允许的请求方法",
        "Request Timeout": "请求超时",
        "Conflict": "冲突",
        "Request Entity Too Large": "请求内容过大",
        "Too Many Requests": "请求过多",
        "Internal Server Error": "服务器内部错误",
        "Bad Gateway": "网关错误",
        "Service Unavailable": "服务不可用",
        "Gateway Timeout": "网关超时",
        "Jupyter has lots of moons, but this is not one...": "Jupyter 有很多卫星，但这里不是其中之一……",
        "You can try restarting your server from the {home_page}.": "您可以在{home_page}重新启动服务器。",
        "home page": "主页",
    }
)

# -- JupyterLab and the user's server (the Lab's language, its notices)
ZH_CN.update(
    {
        # (lab texts go here)
    }
)

# -- image pulls a spawn waits on (issue 19, part 4)
ZH_CN.update(
    {
        # (image pull texts go here)
        "Pulling image {image}": "正在拉取镜像 {image}",
        "Pulling image {image} — {done} of {total} layers": "正在拉取镜像 {image} — 已完成 {done}/{total} 层",
        "Pulling image {image} — {done} of {total} layers, {got} of {size}": (
            "正在拉取镜像 {image} — 已完成 {done}/{total} 层，已下载 {got}/{size}"
        ),
        "Pulled image {image}": "镜像 {image} 已拉取",
        "Could not pull the image {image}: {error}": "无法拉取镜像 {image}：{error}",
        "The image {image} is still being pulled after {minutes} minutes; try again later.": (
            "镜像 {image} 拉取 {minutes} 分钟后仍未完成，请稍后再试。"
        ),
    }
)

# -- the sources' stop rules: plateau stop, a bigger instance, a busy kernel on an idle GPU (issue 19, part 6)
ZH_CN.update(
    {
        # (stop-rule and bigger-instance texts go here)
        "busy_gpu_idle": "内核忙而 GPU 空闲",
        "Your notebook's kernel is busy but your GPU has done nothing (under {threshold}%) for {age}"
        " (a hung data loader, a cell waiting for input(), a deadlock?):"
        " this server will be stopped at {stop_time} unless the GPU works again or you use the server.": (
            "您的笔记本内核一直忙碌，但 GPU 已有 {age} 没有工作（利用率低于 {threshold}%）"
            "（数据加载卡住、单元格在等待 input()、死锁？）：除非 GPU 重新工作或您使用此服务器，"
            "它将在 {stop_time} 停止。"
        ),
        "Your server was stopped at {stop_time} because its kernel was busy while its GPU did nothing"
        " (under {threshold}%) for {age}. Billing stopped with it; your files are kept.": (
            "您的服务器已于 {stop_time} 停止：其内核忙碌而 GPU 有 {age} 没有工作（利用率低于 {threshold}%）。"
            "计费已随之停止；您的文件仍保留。"
        ),
        "plateau": "训练停滞",
        "preempted": "被抢占",
        "reserved": "已为课程预留",
        "GPU memory has been above {percent}% for {minutes} minutes, and no profile with more GPU memory or"
        " more GPUs is open to you: try a smaller batch size or model.": (
            "GPU 显存已连续 {minutes} 分钟高于 {percent}%，而您没有可用的显存更大或 GPU 更多的配置："
            "请尝试减小批大小或模型。"
        ),
        "GPU memory has been above {percent}% for {minutes} minutes: a bigger instance may help."
        " {profile} ({gpus} × {memory} GB GPU memory) costs {price}/min.": (
            "GPU 显存已连续 {minutes} 分钟高于 {percent}%：更大的实例可能有帮助。"
            "{profile}（{gpus} × {memory} GB 显存）每分钟 {price}。"
        ),
    }
)

# -- notices, mail and advice in the user's language (issue 19, part 6)
ZH_CN.update(
    {
        # (notice, mail and advice texts go here)
        # budget alerts (service/domain/alerts.py MESSAGES): the Lab notice, the mail, the chats
        "the personal budget of {user}": "{user} 的个人预算",
        "the {group} group budget": "{group} 组的预算",
        "{start} to {end}": "{start}至{end}",
        "now": "立即",
        "in 1 second": "1 秒后",
        "in {n} seconds": "{n} 秒后",
        "in 1 minute": "1 分钟后",
        "in {n} minutes": "{n} 分钟后",
        "[GPU] {user} has used {threshold}% of {budget}": "[GPU] {user} 已用掉{budget}的 {threshold}%",
        "[GPU] Budget used up: {budget} ({user})": "[GPU] 预算已用完：{budget}（{user}）",
        "{user} has used {used} of {limit} of {budget} for {period} (the {threshold}% alert).": (
            "{user} 在 {period} 期间已用掉{budget}中的 {used}（额度 {limit}）（{threshold}% 提醒）。"
        ),
        "{user} has used up {budget} for {period} ({used} of {limit}).": (
            "{user} 已用完 {period} 期间的{budget}（已用 {used}，额度 {limit}）。"
        ),
        "A GPU server costs money for every minute it runs, even when idle:"
        " stop servers that are not in use (File > Hub Control Panel > Stop My Server).": (
            "GPU 服务器运行的每一分钟都会计费，即使处于空闲状态：请停止不用的服务器"
            "（文件 > Hub 控制面板 > 停止我的服务器）。"
        ),
        "The budget is almost used up. When it runs out, running GPU servers are stopped:"
        " save work and checkpoints now.": (
            "预算即将用完。用完后，正在运行的 GPU 服务器将被停止：请立即保存工作和检查点。"
        ),
        "Running GPU servers of {user} will be stopped {grace}, and no new GPU server can start"
        " until the budget resets or is raised. Save work now.": (
            "{user} 正在运行的 GPU 服务器将于{grace}停止，在预算重置或提高之前无法启动新的 GPU 服务器。请立即保存工作。"
        ),
        "You receive this message as the student, an instructor of the student's group"
        " or an administrator of the GPU service.": (
            "您收到此消息，是因为您是该学生本人、该学生所在组的教师或 GPU 服务的管理员。"
        ),
        "Hello,\n\n{summary}\n\n{advice}\n\n-- \n{footer}\n": "您好：\n\n{summary}\n\n{advice}\n\n-- \n{footer}\n",
        "You have used {used} of {limit} of {budget} for {period} ({threshold}%)."
        " Stop servers you are not using: a running GPU server costs money even when idle.": (
            "您在 {period} 期间已用掉{budget}中的 {used}（额度 {limit}，{threshold}%）。"
            "请停止不用的服务器：运行中的 GPU 服务器即使空闲也会计费。"
        ),
        "You have used {used} of {limit} of {budget} for {period} ({threshold}%)."
        " Save your work now: servers are stopped when the budget runs out.": (
            "您在 {period} 期间已用掉{budget}中的 {used}（额度 {limit}，{threshold}%）。"
            "请立即保存工作：预算用完时服务器将被停止。"
        ),
        "Budget used up: you have used {used} of {limit} of {budget} for {period}."
        " Your server will be stopped {grace}. Save your work now.": (
            "预算已用完：您在 {period} 期间已用掉{budget}中的 {used}（额度 {limit}）。"
            "您的服务器将于{grace}停止。请立即保存工作。"
        ),
        # idle warnings and stops (service/domain/culling.py MESSAGES)
        "Your GPU has been idle (under {threshold}%) for {idle_minutes} minutes:"
        " this server will be stopped at {stop_time} unless you use it.": (
            "您的 GPU 已空闲（利用率低于 {threshold}%）{idle_minutes} 分钟："
            "除非您使用它，此服务器将在 {stop_time} 停止。"
        ),
        "This server has had no activity for {idle_minutes} minutes:"
        " it will be stopped at {stop_time} unless you use it.": (
            "此服务器已有 {idle_minutes} 分钟没有任何活动：除非您使用它，它将在 {stop_time} 停止。"
        ),
        "This server has been running for {age}, and servers are stopped after {limit}:"
        " it will be stopped at {stop_time}. Save your work now.": (
            "此服务器已运行 {age}，服务器运行 {limit} 后会被停止：它将在 {stop_time} 停止。请立即保存工作。"
        ),
        "Your server was stopped at {stop_time} because its GPU was idle (under {threshold}%)"
        " for {idle_minutes} minutes. Billing stopped with it; your files are kept.": (
            "您的服务器已于 {stop_time} 停止，因为其 GPU 空闲（利用率低于 {threshold}%）达 {idle_minutes} 分钟。"
            "计费已随之停止；您的文件仍保留。"
        ),
        "Your server was stopped at {stop_time} after {idle_minutes} minutes without activity."
        " Billing stopped with it; your files are kept.": (
            "您的服务器在 {idle_minutes} 分钟没有活动后，已于 {stop_time} 停止。计费已随之停止；您的文件仍保留。"
        ),
        "Your server was stopped at {stop_time}: servers are stopped after {limit}."
        " Billing stopped with it; your files are kept.": (
            "您的服务器已于 {stop_time} 停止：服务器运行 {limit} 后会被停止。计费已随之停止；您的文件仍保留。"
        ),
        "You are using your server again: it will not be stopped.": "您又在使用服务器了：它不会被停止。",
        "Your GPU server will be stopped": "您的 GPU 服务器将被停止",
        "Idle stop cancelled": "空闲停止已取消",
        "GPU memory has been above {percent}% for {minutes} minutes: a profile with a larger GPU may help.": (
            "GPU 显存占用已连续 {minutes} 分钟超过 {percent}%：换用显存更大的 GPU 配置可能会有帮助。"
        ),
        "1 minute": "1 分钟",
        "1 hour": "1 小时",
        "{n} hours": "{n} 小时",
        # finished runs (service/domain/jobs.py)
        "1 minute billed, {cost}": "计费 1 分钟，{cost}",
        "{minutes} minutes billed, {cost}": "计费 {minutes} 分钟，{cost}",
        "(default)": "（默认）",
        "[GPU] Your server stopped: training reached a plateau": "[GPU] 您的服务器已停止：训练已停滞",
        "Your server {server} stopped when training reached a plateau (a checkpoint was saved; the GPU is free):"
        " {billed}.": "您的服务器 {server} 在训练停滞时停止（已保存检查点；GPU 已释放）：{billed}。",
        "[GPU] Your server stopped when its cells finished": "[GPU] 您的服务器已在单元格运行完后停止",
        "Your server {server} stopped when its running cells finished: {billed}.": (
            "您的服务器 {server} 在正在运行的单元格结束后停止：{billed}。"
        ),
        "[GPU] Job {job} finished: {notebook}": "[GPU] 作业 {job} 已完成：{notebook}",
        "[GPU] Job {job} failed: {notebook}": "[GPU] 作业 {job} 失败：{notebook}",
        "[GPU] Job {job} was stopped at its time limit: {notebook}": "[GPU] 作业 {job} 已到时限被停止：{notebook}",
        "[GPU] Job {job} was cancelled: {notebook}": "[GPU] 作业 {job} 已取消：{notebook}",
        "[GPU] Job {job} ended: {notebook}": "[GPU] 作业 {job} 已结束：{notebook}",
        "Job {job} ({notebook}) finished: {billed}. Output: ~/{output}, log: ~/{log}.": (
            "作业 {job}（{notebook}）已完成：{billed}。输出：~/{output}，日志：~/{log}。"
        ),
        "Job {job} ({notebook}) failed: {billed}. Output: ~/{output}, log: ~/{log}.": (
            "作业 {job}（{notebook}）失败：{billed}。输出：~/{output}，日志：~/{log}。"
        ),
        "Job {job} ({notebook}) was stopped at its time limit: {billed}. Output: ~/{output}, log: ~/{log}.": (
            "作业 {job}（{notebook}）已到时限被停止：{billed}。输出：~/{output}，日志：~/{log}。"
        ),
        "Job {job} ({notebook}) was cancelled: {billed}. Output: ~/{output}, log: ~/{log}.": (
            "作业 {job}（{notebook}）已取消：{billed}。输出：~/{output}，日志：~/{log}。"
        ),
        "Job {job} ({notebook}) ended: {billed}. Output: ~/{output}, log: ~/{log}.": (
            "作业 {job}（{notebook}）已结束：{billed}。输出：~/{output}，日志：~/{log}。"
        ),
        # right-sizing advice (service/domain/advice.py; the Lab panel's own are labextension/src/zh_CN.ts)
        "{used} of {count} GPUs did work (peak {peak} GB), busy {busy}% of the time.": (
            "{count} 块 GPU 中只有 {used} 块在工作（峰值 {peak} GB），{busy}% 的时间处于忙碌状态。"
        ),
        "1 GPU would have done.": "1 块 GPU 就够了。",
        "{count} GPUs would have done.": "{count} 块 GPU 就够了。",
        "Peak {peak} GB of {total} GB GPU memory, busy {busy}% of the time.": (
            "GPU 显存峰值 {peak} GB（共 {total} GB），{busy}% 的时间处于忙碌状态。"
        ),
        "The {profile} profile ({rate}/min instead of {current}/min) would very likely have served.": (
            "{profile} 配置（每分钟 {rate}，而不是 {current}）很可能就能满足需要。"
        ),
        "The {profile} profile ({rate}/min instead of {current}/min) would likely have served.": (
            "{profile} 配置（每分钟 {rate}，而不是 {current}）可能就能满足需要。"
        ),
        "This session would have cost {would} instead of {cost}.": "本次会话本可只花 {would}，而不是 {cost}。",
        "So far this session would have cost {would} instead of {cost}.": (
            "到目前为止，本次会话本可只花 {would}，而不是 {cost}。"
        ),
        # the instructors' weekly digest (service/domain/advice.py)
        "GPU right-sizing for {group}: {amount} could have been saved ({first} to {last})": (
            "{group} 的 GPU 规格建议：本可节省 {amount}（{first}至{last}）"
        ),
        "GPU sessions of the {group} group from {first} to {last}:": "{group} 组从 {first} 到 {last} 的 GPU 会话：",
        "{judged} sessions judged, {advised} of them on a larger profile than their work needed;"
        " following the advice would have saved {amount}.": (
            "已评估 {judged} 个会话，其中 {advised} 个使用了超出所需的配置；按建议选择配置本可节省 {amount}。"
        ),
        "- {profile}: {advised} of {judged} sessions, {amount} (chronically larger than needed)": (
            "- {profile}：{judged} 个会话中的 {advised} 个，{amount}（长期超出所需）"
        ),
        "- {profile}: {advised} of {judged} sessions, {amount}": (
            "- {profile}：{judged} 个会话中的 {advised} 个，{amount}"
        ),
        "Per session:": "各会话：",
        "- {user}, {started} UTC: {advice}": "- {user}，{started} UTC：{advice}",
        "... and {count} more (GET /services/gpu/api/v1/advice).": (
            "……另有 {count} 个（GET /services/gpu/api/v1/advice）。"
        ),
    }
)

# issue 17: H1
ZH_CN.update(
    {
        "This profile needs a MIG {slice} slice of {model} but this host has {total}. Ask your administrator to fix"
        " the profile.": "此配置需要 {model} 的 MIG {slice} 切片，但本机只有 {total} 个。请让管理员修正该配置。",
        "share 1/{count} of a {model}": "{model} 的 1/{count} 份额",
        "share 1/{count} of an {model}": "{model} 的 1/{count} 份额",
        "MIG {slice} of a {model}": "{model} 的 MIG {slice} 切片",
        "MIG {slice} of an {model}": "{model} 的 MIG {slice} 切片",
        "{free} of {total} shares free": "空闲 {free} 份，共 {total} 份",
        "{free} of {total} shares free ({waiting} waiting)": "空闲 {free} 份，共 {total} 份（{waiting} 人排队）",
        "{free} of {total} slices free": "空闲 {free} 个切片，共 {total} 个",
        "{free} of {total} slices free ({waiting} waiting)": "空闲 {free} 个切片，共 {total} 个（{waiting} 人排队）",
        "Waiting for a free share 1/{share} of a {model} — position {position} of {length}": (
            "正在等待空闲的 {model} 1/{share} 份额 — 排队中：第 {position} 位，共 {length} 位"
        ),
        "Waiting for a free share 1/{share} of an {model} — position {position} of {length}": (
            "正在等待空闲的 {model} 1/{share} 份额 — 排队中：第 {position} 位，共 {length} 位"
        ),
        "Waiting for a free MIG {slice} slice of a {model} — position {position} of {length}": (
            "正在等待空闲的 {model} MIG {slice} 切片 — 排队中：第 {position} 位，共 {length} 位"
        ),
        "Waiting for a free MIG {slice} slice of an {model} — position {position} of {length}": (
            "正在等待空闲的 {model} MIG {slice} 切片 — 排队中：第 {position} 位，共 {length} 位"
        ),
        "share {index}/{count}": "份额 {index}/{count}",
    }
)

# issue 17: H5
ZH_CN.update(
    {
        # the cap notice of a share or MIG slice (service/domain/culling.py cap_text)
        "Your kernels use {used} of your share's {cap} GB; past it TensorFlow stops with an out-of-memory error.": (
            "您的内核已使用您这份 GPU 的 {cap} GB 显存中的 {used} GB；超过上限时 TensorFlow 会因显存不足而报错停止。"
        ),
        "Your kernels use {used} of your MIG slice's {cap} GB; past it TensorFlow stops with an out-of-memory error.": (
            "您的内核已使用您的 MIG 切片 {cap} GB 显存中的 {used} GB；超过上限时 TensorFlow 会因显存不足而报错停止。"
        ),
        "Your kernels use {percent}% of your share's GPU memory;"
        " past it TensorFlow stops with an out-of-memory error.": (
            "您的内核已使用您这份 GPU 显存的 {percent}%；超过上限时 TensorFlow 会因显存不足而报错停止。"
        ),
        "Your kernels use {percent}% of your MIG slice's GPU memory;"
        " past it TensorFlow stops with an out-of-memory error.": (
            "您的内核已使用您的 MIG 切片显存的 {percent}%；超过上限时 TensorFlow 会因显存不足而报错停止。"
        ),
        "No profile with more GPU memory is open to you: try a smaller batch size or model.": (
            "您没有可用的显存更大的配置：请尝试更小的批大小或模型。"
        ),
        "The profile '{profile}' has {gpus} × {memory} GB.": "配置“{profile}”有 {gpus} × {memory} GB 显存。",
        "The profile '{profile}' has {memory} GB.": "配置“{profile}”有 {memory} GB 显存。",
        # a move to another profile keeps the tier and the group that pays (service/domain/moves.py, restart-bigger)
        "The group {group}, which pays for this session, cannot pay for {profile}.": (
            "为此会话付费的组 {group} 无法为 {profile} 付费。"
        ),
        "No profile bigger than {profile} is open to you at the same tier, paid by the same group:"
        " your server keeps running.": (
            "没有比 {profile} 更大、同一价格档且由同一组付费的配置可供您使用：您的服务器继续运行。"
        ),
        "The restart on {profile} would be refused: {reason} Your server keeps running.": (
            "在 {profile} 上重启会被拒绝：{reason}您的服务器继续运行。"
        ),
        # advice that suggests a share (service/domain/advice.py share_unit, share_sentence)
        "Half a {model}": "半块 {model}",
        "Half an {model}": "半块 {model}",
        "A third of a {model}": "三分之一块 {model}",
        "A third of an {model}": "三分之一块 {model}",
        "A quarter of a {model}": "四分之一块 {model}",
        "A quarter of an {model}": "四分之一块 {model}",
        "A 1/{count} share of a {model}": "{count} 分之一块 {model}",
        "A 1/{count} share of an {model}": "{count} 分之一块 {model}",
        "{unit} would very likely have served: {would} instead of {cost}"
        " (the {profile} profile, {rate}/min instead of {current}/min).": (
            "{unit}很可能就够用了：费用为 {would}，而不是 {cost}（{profile} 配置，每分钟 {rate}，而不是 {current}）。"
        ),
        "{unit} would likely have served: {would} instead of {cost}"
        " (the {profile} profile, {rate}/min instead of {current}/min).": (
            "{unit}可能就够用了：费用为 {would}，而不是 {cost}（{profile} 配置，每分钟 {rate}，而不是 {current}）。"
        ),
        "{unit} would very likely have served so far: {would} instead of {cost}"
        " (the {profile} profile, {rate}/min instead of {current}/min).": (
            "到目前为止，{unit}很可能就够用了：费用为 {would}，而不是 {cost}"
            "（{profile} 配置，每分钟 {rate}，而不是 {current}）。"
        ),
        "{unit} would likely have served so far: {would} instead of {cost}"
        " (the {profile} profile, {rate}/min instead of {current}/min).": (
            "到目前为止，{unit}可能就够用了：费用为 {would}，而不是 {cost}"
            "（{profile} 配置，每分钟 {rate}，而不是 {current}）。"
        ),
    }
)

# issue 17: H2
ZH_CN.update(
    {
        # shared GPUs on Kubernetes (spawners/assign/cluster.py)
        "This profile needs a share of a time-sliced {model} GPU, but no node of the cluster offers one ({resource})."
        " Ask your administrator to fix the profile.": (
            "此配置需要一块分时共享的 {model} GPU 的一个份额，但集群中没有节点提供（{resource}）。"
            "请让管理员修正该配置。"
        ),
        "No share of a time-sliced {model} GPU became free in the cluster within {limit}; nothing was started."
        " Try again later or choose another profile.": (
            "{limit}内集群中没有空闲的分时共享 {model} GPU 份额；未启动任何服务器。请稍后再试，或选择其他配置。"
        ),
    }
)

# issue 16: the scheduler's texts (jupyterhub_gpu/scheduler/ TEXTS) and the gpu service's words of the schedule
# (service/domain/schedule.py: stop-order notices, GET queue)
ZH_CN.update(
    {
        # why a request stands where it does
        "requests are served in the order they came": "请求按到达的先后顺序处理",
        "a {model} frees as soon as the server told to stop has ended": "被通知停止的服务器结束后，{model} 即会空出",
        "your group has used {percent}% of its share of {model} GPUs {period}": (
            "您的组{period}已用掉其 {model} GPU 份额的 {percent}%"
        ),
        "your group has used {percent}% of its share of {model} GPUs {period}; your {waited} of waiting moves you up": (
            "您的组{period}已用掉其 {model} GPU 份额的 {percent}%；您已等待 {waited}，排名因此提前"
        ),
        "your group has no share of {model} GPUs: it is served when no group with a share waits,"
        " and your {waited} of waiting moves you up": (
            "您的组没有 {model} GPU 份额：没有其他有份额的组在等待时才轮到它；您已等待 {waited}，排名因此提前"
        ),
        "preemptible requests wait until no full-price request needs a {model}": (
            "可抢占请求要等到没有全价请求需要 {model} 时才会启动"
        ),
        "{label} has {gpus} reserved until {end}": "{gpus} 已为 {label} 预留，直到 {end}",
        "the free {model} GPUs are reserved for {label} from {start}": (
            "空闲的 {model} GPU 从 {start} 起为 {label} 预留"
        ),
        # the headline of a waiting request
        "Waiting for a free {model} — position {position} of {length} — {wait}": (
            "正在等待空闲的 {model} — 排队中：第 {position} 位，共 {length} 位 — {wait}"
        ),
        "no estimate yet": "暂无预计等待时间",
        "any moment now": "随时可能开始",
        "about {duration}": "约 {duration}",
        "more than a day": "超过一天",
        # grants
        "{gpus} free": "{gpus} 空闲",
        "{gpus} reserved for {label}": "为 {label} 预留的 {gpus}",
        "may run until {until}: {label} has {gpus} reserved from {start}": (
            "最多可运行到 {until}：从 {start} 起 {gpus} 已为 {label} 预留"
        ),
        # preemption and reservations
        "this server will be stopped in {grace} to free its GPU for a full-price request;"
        " your training is being checkpointed": (
            "此服务器将在 {grace} 后停止，以便把其 GPU 让给一个全价请求；您的训练正在保存检查点"
        ),
        "this server will be stopped in {grace} to free its GPU for a full-price request; save your work now": (
            "此服务器将在 {grace} 后停止，以便把其 GPU 让给一个全价请求；请立即保存工作"
        ),
        "this server was stopped at {at}, as it was told": "此服务器已按通知于 {at} 停止",
        "this server was stopped at {at} to free its GPU for a full-price request": (
            "此服务器已于 {at} 停止，以便把其 GPU 让给一个全价请求"
        ),
        "this server was stopped at {at}: its GPUs are reserved for a class from then": (
            "此服务器已于 {at} 停止：从那时起其 GPU 已为一门课程预留"
        ),
        # refusals
        "this pool has no {model} GPUs (it has {models})": "此资源池没有 {model} GPU（它有 {models}）",
        "{gpus} asked, but the pool has {total}": "申请了 {gpus}，但资源池只有 {total} 块",
        "a request needs at least one GPU, got {count}": "请求至少需要一块 GPU，收到的是 {count}",
        "{label} reserves {gpus} from {start} to {end}, but the pool has {total} and other bookings hold"
        " {taken} then": (
            "{label} 预留 {start} 至 {end} 的 {gpus}，但资源池只有 {total} 块，且当时已有 {taken} 块为其他组预留"
        ),
        # the scheduler's values, worded again (service/domain/schedule.py)
        "1 {model}": "1 块 {model}",
        "{count} {model}s": "{count} 块 {model}",
        "{n} min": "{n} 分钟",
        "{hours} h": "{hours} 小时",
        "{hours} h {minutes} min": "{hours} 小时 {minutes} 分钟",
        "{n} s": "{n} 秒",
        "this week": "本周",
        "today": "今天",
        "in the last {n} days": "最近 {n} 天内",
        "in the last {n} hours": "最近 {n} 小时内",
        "{month}/{day} {time}": "{month}月{day}日 {time}",
        # stop orders' notices (service/domain/schedule.py NOTICE_TEXTS, AFTER_TEXTS, SUBJECTS)
        "This server will be stopped at {stop_time} to free its GPU for a full-price request; your training"
        " is being checkpointed (CheckpointAndResume saves on the stop).": (
            "此服务器将于 {stop_time} 停止，以便把其 GPU 让给一个全价请求；您的训练正在保存检查点"
            "（CheckpointAndResume 会在停止时保存）。"
        ),
        "This server will be stopped at {stop_time} to free its GPU for a full-price request; save your work now.": (
            "此服务器将于 {stop_time} 停止，以便把其 GPU 让给一个全价请求；请立即保存工作。"
        ),
        "This server may run until {until}: {label} has {gpus} reserved from {start}."
        " It will be stopped then; save your work.": (
            "此服务器最多可运行到 {until}：从 {start} 起 {gpus} 已为 {label} 预留。届时它将被停止；请保存您的工作。"
        ),
        "This server will be stopped at {stop_time}: its GPUs are reserved for a class from then."
        " Save your work now.": "此服务器将于 {stop_time} 停止：从那时起其 GPU 已为一门课程预留。请立即保存工作。",
        "It will be put back in the queue and start again when a {model} is free.": (
            "之后它会被重新放回队列，等有空闲的 {model} 时再次启动。"
        ),
        "It will be put back in the queue and start again when an {model} is free.": (
            "之后它会被重新放回队列，等有空闲的 {model} 时再次启动。"
        ),
        "It will be put back in the queue and start again when a GPU is free.": (
            "之后它会被重新放回队列，等有空闲的 GPU 时再次启动。"
        ),
        "The job will be put back in the queue and run again when a {model} is free; with"
        " CheckpointAndResume it goes on from its last checkpoint.": (
            "作业会被重新放回队列，等有空闲的 {model} 时再次运行；使用 CheckpointAndResume 时会从最近的检查点继续。"
        ),
        "The job will be put back in the queue and run again when an {model} is free; with"
        " CheckpointAndResume it goes on from its last checkpoint.": (
            "作业会被重新放回队列，等有空闲的 {model} 时再次运行；使用 CheckpointAndResume 时会从最近的检查点继续。"
        ),
        "The job will be put back in the queue and run again when a GPU is free; with"
        " CheckpointAndResume it goes on from its last checkpoint.": (
            "作业会被重新放回队列，等有空闲的 GPU 时再次运行；使用 CheckpointAndResume 时会从最近的检查点继续。"
        ),
        "[GPU] Your server {server} will be stopped at {stop_time} to free its GPU": (
            "[GPU] 您的服务器 {server} 将于 {stop_time} 停止，以便让出其 GPU"
        ),
        "[GPU] Your server {server} will be stopped at {stop_time} for a class reservation": (
            "[GPU] 您的服务器 {server} 将于 {stop_time} 停止：GPU 已为课程预留"
        ),
        "[GPU] Your server {server} was not put back in the queue": "[GPU] 您的服务器 {server} 未能重新放回队列",
        # a withdrawn order's follow-up (service/domain/schedule.py WITHDRAWN_TEXTS, SUBJECTS)
        "The stop of this server at {stop_time} is off: the GPU is no longer needed.": (
            "此服务器原定于 {stop_time} 的停止已取消：不再需要其 GPU。"
        ),
        "The stop of this server at {stop_time} is off: the class reservation no longer needs its GPU.": (
            "此服务器原定于 {stop_time} 的停止已取消：课程预留不再需要其 GPU。"
        ),
        "The stop of this server at {stop_time} is off: the class booking was cancelled.": (
            "此服务器原定于 {stop_time} 的停止已取消：该课程预留已被取消。"
        ),
        "[GPU] The stop of your server {server} at {stop_time} is off": (
            "[GPU] 您的服务器 {server} 原定于 {stop_time} 的停止已取消"
        ),
        "Your server {server} was stopped to free its GPU and could not be put back in the queue: {reason}": (
            "您的服务器 {server} 已停止以让出其 GPU，但未能重新放回队列：{reason}"
        ),
    }
)

# the schedule on the usage pages (service/web/pages.py, templates/schedule.html; docs/scheduling.md)
ZH_CN.update(
    {
        "Schedule": "调度",
        "Reservations": "预留",
        "Every reservation": "全部预留",
        "Model": "型号",
        "Window": "时段",
        "Weekly until": "每周重复至",
        "Note": "备注",
        "Booked by": "预订人",
        "Cancel": "取消",
        "Cancelled.": "已取消。",
        "No reservations.": "暂无预留。",
        "Book GPUs for this group": "为本组预留 GPU",
        "Begins": "开始时间",
        "Ends": "结束时间",
        "Book": "预留",
        "The lab's GPUs: {pool}. Times are in {tz}.": "实验室的 GPU：{pool}。时间均为 {tz} 时间。",
        "The gpu service does not know the lab's GPUs (c.GPUService.gpu_pool): nothing can be booked until an"
        " administrator sets them.": (
            "gpu 服务不知道实验室有哪些 GPU（c.GPUService.gpu_pool）：在管理员设置之前无法预留。"
        ),
        "Leave “Weekly until” empty for a single window. During a window the group's members get its GPUs"
        " first.": "“每周重复至”留空表示只预留一个时段。在预留时段内，本组成员优先使用预留的 GPU。",
        "Book for a group on its group page.": "请在组页面上为该组预留。",
        # the booking limits under the booking form (docs/scheduling.md, "Booking limits")
        "An instructor books at least {notice} hours ahead, and a group holds GPUs of a model for at most"
        " {hours} hours without a break (its bookings less than {gap} minutes apart count as one).": (
            "讲师须至少提前 {notice} 小时预订；一个组连续占用同一型号 GPU 最长 {hours} 小时"
            "（本组相隔不足 {gap} 分钟的预订算作一次连续占用）。"
        ),
        "At most {gpu_hours} GPU-hours a week (Monday to Sunday) for the group, every model together.": (
            "每组每周（周一至周日）合计最多 {gpu_hours} GPU 小时，所有型号一并计算。"
        ),
        "At most {percent}% of each model's GPUs at once.": "同一时刻最多占用每种型号 GPU 的 {percent}%。",
        "These limits count every booking of the group, each week of a weekly one; administrators are not"
        " limited.": "这些限制计入本组的全部预订（每周重复的预订按每一周计算）；管理员不受限制。",
        "Shares": "份额",
        "Share": "份额",
        "Set by": "设置人",
        "default": "默认",
        "No shares are set: every group has the default.": "尚未设置份额：每个组都使用默认份额。",
        "Under fair share, a group's use of a model is weighed against its share; admins set shares on the"
        " administration page.": "公平共享调度会把一个组对某型号的用量与其份额相比较；份额由管理员在管理页面上设置。",
        "Set share": "设置份额",
        "Clear": "清除",
        "A share is a whole number from 0 (only waiting lifts the group) up; a group without one has the"
        " default.": "份额是从 0 开始的整数（为 0 时只有等待时间能提升该组的排位）；未设置份额的组使用默认值。",
        "Queue": "排队",
        "Waiting for a GPU": "等待 GPU",
        "Position": "位置",
        "Estimate": "预计等待",
        "{position} of {length}": "第 {position} 位，共 {length} 位",
        "Nothing is waiting.": "没有等待中的请求。",
        "Preemptions in the last {days} days": "最近 {days} 天的抢占",
        "None in the last {days} days.": "最近 {days} 天内没有。",
        "Decided": "决定时间",
        "Stop at": "停止时间",
        "For user": "让给的用户",
        "pending": "待执行",
    }
)

#: English display texts of codes the pages pass through ``_()`` (stop reasons, units).
EN: dict[str, str] = {
    "stopped": "stopped by user",
    "exited": "exited",
    "budget": "budget",
    "gpu_idle": "GPU idle",
    "inactive": "inactive",
    "max_age": "maximum age",
    "busy_gpu_idle": "busy kernel, idle GPU",
    "reconciled": "reconciled",
    "orphaned": "interrupted spawn",
    "job_finished": "job finished",
    "job_time_limit": "job time limit",
    "job_cancelled": "job cancelled",
    "stop_when_done": "stopped when done",
    "plateau": "training plateau",
    "preempted": "preempted",
    "reserved": "reserved for a class",
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


def query_language(handler) -> str | None:
    """The switch's ``?lang=`` of a tornado request ``handler``, when it names one of :data:`LANGUAGES`.

    Read from the raw bytes: tornado's ``get_query_argument`` answers HTTP 400 to a value that is not
    UTF-8, and would again while the error page is rendered.
    """
    raw = (handler.request.query_arguments.get("lang") or [b""])[-1]
    return next((code for code in LANGUAGES if raw == code.encode()), None)


def language_of(handler) -> str:
    """The language of a tornado request ``handler`` (a hub page, the spawn form, a service page):
    the switch's ``?lang=`` (:func:`query_language`), its cookie, else the request's ``Accept-Language``,
    else English."""
    return query_language(handler) or negotiate(
        handler.request.headers.get("Accept-Language"), handler.get_cookie(COOKIE)
    )


def translator(lang: str):
    """``_(text, **values)`` for ``lang``: the catalogue's text (or the English), formatted."""
    catalogue = ZH_CN if lang == "zh-CN" else EN

    def _(text: str, **values) -> str:
        out = catalogue.get(text, text)
        return out.format(**values) if values else out

    return _
