"""zerolab 的中文消息目录：每个模块一节，键是代码里的英文模板，值是它的中文。

How it is used: ``zerolab/i18n.py`` (``T = catalogue("progress")``; ``T(english, **fields)``).
Each Chinese template must have exactly its English's fields (``tests/test_i18n.py`` checks it,
and that every template a translated module uses is here). Terms follow ``docs/glossary.md``.
"""
from __future__ import annotations

ZH: dict[str, dict[str, str]] = {}

# -- zerolab progress ---------------------------------------------------------------------------------
ZH["progress"] = {
    "done": "已完成",
    "tried": "尝试过",
    "not started": "未开始",
    "{n} run": "运行 {n} 次",
    "{n} runs": "运行 {n} 次",
    "passed {when} ({tries})": "{when} 通过（{tries}）",
    "not passed yet ({tries}); last: {message}": "尚未通过（{tries}）；最近一次：{message}",
    "{done} of {total} exercises done": "{total} 个练习已完成 {done} 个",
    "exercise checks recorded in {path}:": "已记录的练习检查（{path}）：",
    "exercise checks:": "练习检查：",
    "zerolab progress: recording is off (${env}={value})": "zerolab progress：记录已关闭（${env}={value}）",
    # the exercises' titles (zerolab.progress.EXERCISES)
    "Exercise 0  · the ring all-gather (ring_all_gather)": "练习 0  · 环形 all-gather（ring_all_gather）",
    "Exercise 1  · weigh the backpack (model_state_bytes_per_rank)": "练习 1  · 称一称背包（model_state_bytes_per_rank）",
    "Exercise 2  · the ring reduce-scatter (ring_reduce_scatter)": "练习 2  · 环形 reduce-scatter（ring_reduce_scatter）",
    "Exercise 3a · who owns which shard (shard_range)": "练习 3a · 谁拥有哪个分片（shard_range）",
    "Exercise 3b · AdamW on one shard (adamw_step)": "练习 3b · 在一个分片上做 AdamW（adamw_step）",
    "Exercise 3c · stage 2's buckets (add_grad, reduce_bucket)": "练习 3c · stage 2 的梯度桶（add_grad, reduce_bucket）",
    "Exercise 4  · the dynamic loss scaler (update_scale)": "练习 4  · 动态损失缩放（update_scale）",
    "Exercise 5  · the host optimizer step over sub-groups (host_step)": "练习 5  · 主机端按子组的优化器更新（host_step）",
    "Exercise 6  · the bucket plan (bucket_params)": "练习 6  · 分桶方案（bucket_params）",
    "Exercise 7  · the config that fits a budget (device_bytes, choose_config)":
        "练习 7  · 装得进显存预算的配置（device_bytes, choose_config）",
    "Exercise 8  · stage-3 knobs for a goal (knobs)": "练习 8  · 为目标调 stage 3 的旋钮（knobs）",
    "Exercise 9  · the capstone's DeepSpeed config": "练习 9  · 综合项目的 DeepSpeed 配置",
    "Exercise 14a · the break-even tokens (tokens_to_hide)": "练习 14a · 盈亏平衡的 token 数（tokens_to_hide）",
    "Exercise 14b · bytes leaving a node with ZeRO++ (inter_node_bytes)":
        "练习 14b · 用 ZeRO++ 时离开节点的字节（inter_node_bytes）",
    "Exercise 14c · when offload's PCIe hides (offload_hide_tokens)":
        "练习 14c · 卸载的 PCIe 传输何时藏得住（offload_hide_tokens）",
}

# -- zerolab report --preflight -----------------------------------------------------------------------
ZH["report"] = {
    "zerolab preflight: is this machine ready for the course?": "zerolab 课前检查：这台机器能开始上课了吗？",
    "READY": "READY：这台机器可以开始上课了",
    "NOT READY: {what}": "NOT READY（未就绪）：{what}",
    "         fix: {fix}": "         修复：{fix}",
    "install Python 3.10 or newer and recreate the venv (python3.11 -m venv .venv)":
        "安装 Python 3.10 或更新的版本，并重建虚拟环境（python3.11 -m venv .venv）",
    "cannot import: {error}": "无法导入：{error}",
    ".venv/bin/pip install torch=={version} (see the README's set-up command)":
        ".venv/bin/pip install torch=={version}（见 README.zh-CN.md 的安装命令）",
    "{version} is older than 2.4": "{version} 早于 2.4",
    " (the course is tested with {version}: it should run, a stored output may differ in wording)":
        "（课程在 {version} 上测试：应当能运行，个别存储的输出在措辞上可能不同）",
    "cannot connect to 127.0.0.1, where the ranks meet: {error}": "无法连接 127.0.0.1（各 rank 在这里会合）：{error}",
    "bring up the loopback interface (ip link set lo up) or allow local TCP connections on 127.0.0.1 in the firewall":
        "启用回环网卡（ip link set lo up），或在防火墙里放行 127.0.0.1 上的本地 TCP 连接",
    "{n} ranks did not start: {error}": "{n} 个 rank 未能启动：{error}",
    "run `zerolab report` and check memory and /dev/shm; behind a firewall, allow connections to 127.0.0.1 "
    "(the ranks meet there)":
        "运行 `zerolab report`，检查内存和 /dev/shm；如有防火墙，放行到 127.0.0.1 的连接（各 rank 在这里会合）",
    "an all-reduce on {n} ranks failed: {error}": "{n} 个 rank 上的一次 all-reduce 失败：{error}",
    "run `zerolab report`; then ask your instructor with its output": "运行 `zerolab report`，然后带着它的输出去问讲师",
    "all-reduce gave {got}, expected {want} on every rank": "all-reduce 得到 {got}，每个 rank 上应为 {want}",
    "run `zerolab report` and ask your instructor with its output": "运行 `zerolab report`，带着它的输出去问讲师",
    "{n} ranks on {backend}: started in {start:.1f} s, all-reduce {reduce:.2f} s, torn down in {stop:.1f} s":
        "{backend} 上的 {n} 个 rank：启动 {start:.1f} s，all-reduce {reduce:.2f} s，关闭 {stop:.1f} s",
    "{bin}/pip install -e '.[course]' (from the repository root)": "{bin}/pip install -e '.[course]'（在仓库根目录下运行）",
    "matplotlib could not render: {error}": "matplotlib 无法绘图：{error}",
    "matplotlib {version} rendered a {size:,}-byte PNG": "matplotlib {version} 画出了一张 {size:,} 字节的 PNG",
    "{n} famil{ies} ({names}): figures can label in Chinese": "{n} 个字体族（{names}）：图中可以使用中文标注",
    "none here: figures of the Chinese edition keep English labels (never boxes); Chinese text (搬家队) in a "
    "browser on this machine may show as boxes (a browser elsewhere uses its own fonts); Debian/Ubuntu: "
    "apt-get install fonts-noto-cjk":
        "本机没有：中文版的图保留英文标注（绝不会显示成方框）；在本机浏览器里，中文（搬家队）可能显示成方框"
        "（其他机器上的浏览器用它自己的字体）；Debian/Ubuntu：apt-get install fonts-noto-cjk",
    "free memory unknown on this platform": "这个平台上无法得知空闲内存",
    "{avail} available of {total}{where}; the chapters need about {need:g} GB":
        "可用 {avail}，共 {total}{where}；各章约需 {need:g} GB",
    "free memory: close other programs or notebooks (Kernel > Shut Down All Kernels), or ask for a server with "
    "{need:g} GB or more":
        "释放内存：关掉其他程序或 notebook（Kernel > Shut Down All Kernels），或者申请一台内存不少于 {need:g} GB 的服务器",
}
