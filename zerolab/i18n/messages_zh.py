"""zerolab 的中文消息目录：每个模块一节，键是代码里的英文模板，值是它的中文。

How it is used: ``zerolab/i18n/language.py`` (``T = catalogue("progress")``; ``T(english, **fields)``; a
template a table holds is marked ``T.mark(english)``; ``T.plural(n, one, other)`` is keyed by
``other``). Each Chinese template must have exactly its English's fields; ``tests/test_i18n.py``
checks it, and that every template a module shows is here, finding both the module's section and
its templates in its code. Terms follow ``docs/glossary.md``.
"""
from __future__ import annotations

ZH: dict[str, dict[str, str]] = {}

# -- zerolab progress ---------------------------------------------------------------------------------
ZH["progress"] = {
    "zerolab: progress not recorded ({what}); the check itself is unaffected":
        "zerolab：进度没有记录下来（{what}）；检查本身不受影响",
    "done": "已完成",
    "tried": "尝试过",
    "not started": "未开始",
    "{n} runs": "运行 {n} 次",
    "passed {when} ({tries})": "{when} 通过（{tries}）",
    "not passed yet ({tries}); last: {message}": "尚未通过（{tries}）；最近一次：{message}",
    "{done} of {total} exercises done": "{total} 个练习已完成 {done} 个",
    "exercise checks recorded in {path}:": "已记录的练习检查（{path}）：",
    "exercise checks:": "练习检查：",
    "({n} records from other clones on this machine not counted; zerolab progress --all counts them)":
        "（本机其他克隆的 {n} 条记录没有计入；zerolab progress --all 会把它们算进来）",
    "zerolab progress: recording is off (${env}={value})": "zerolab progress：记录已关闭（${env}={value}）",
    # the exercises' titles (zerolab.course.progress.EXERCISES)
    "Exercise 0  · the ring all-gather (ring_all_gather)": "练习 0  · 环形 all-gather（ring_all_gather）",
    "Exercise 1  · weigh the backpack (model_state_bytes_per_rank)": "练习 1  · 称一称背包（model_state_bytes_per_rank）",
    "Exercise 2  · the ring reduce-scatter (ring_reduce_scatter)": "练习 2  · 环形 reduce-scatter（ring_reduce_scatter）",
    "Exercise 3 (a) · who owns which shard (shard_range)": "练习 3 (a) · 谁负责哪个分片（shard_range）",
    "Exercise 3 (b) · AdamW on one shard (adamw_step)": "练习 3 (b) · 只在一个分片上做 AdamW（adamw_step）",
    "Exercise 3b · stage 2's buckets (add_grad, reduce_bucket)": "练习 3b · stage 2 的梯度桶（add_grad, reduce_bucket）",
    "Exercise 3c · ZeRO-1 by hand, against DDP (ShardedOptimizer)":
        "练习 3c · 亲手写 ZeRO-1，对照 DDP（ShardedOptimizer）",
    "Exercise 4  · the dynamic loss scaler (update_scale)": "练习 4  · 动态损失缩放（update_scale）",
    "Exercise 5  · design the host optimizer step (host_step)": "练习 5  · 设计主机端的优化器更新（host_step）",
    "Exercise 6  · the bucket plan (bucket_params)": "练习 6  · 分桶方案（bucket_params）",
    "Exercise 7  · the config that fits a budget (device_bytes, choose_config)":
        "练习 7  · 装得进显存预算的配置（device_bytes, choose_config）",
    "Exercise 8  · stage-3 knobs for a goal (knobs)": "练习 8  · 为目标调 stage 3 的旋钮（knobs）",
    "Exercise 8c · stage 3's gather and release as module hooks (MyHooks)":
        "练习 8c · 把 stage 3 的收集与释放写成模块钩子（MyHooks）",
    "Exercise 9  · the capstone's DeepSpeed config": "练习 9  · 综合项目的 DeepSpeed 配置",
    "Exercise 13 · qwZ's block quantizer (quantize, dequantize)": "练习 13 · qwZ 的分块量化器（quantize, dequantize）",
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
    "none here: in a browser on this machine the Chinese edition's text (搬家队) shows as boxes; its figures keep "
    "English labels; Debian/Ubuntu: apt-get install fonts-noto-cjk, then reload the page":
        "本机没有：在本机的浏览器里，中文版的正文（搬家队）会显示成方框；图保留英文标注；"
        "Debian/Ubuntu：apt-get install fonts-noto-cjk，然后刷新页面",
    "but the Chinese edition needs a CJK font where your browser runs: without one its text is boxes (see CJK fonts "
    "above)":
        "但中文版需要浏览器所在的机器有中文字体：没有的话，正文全是方框（见上面的 CJK fonts 一行）",
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
    # zerolab report (without --preflight): the one-screen report
    "unknown": "未知",
    "yes": "有",
    "no": "无",
    "none": "无",
    "zerolab {version} report: {node}": "zerolab {version} 环境报告：{node}",
    "this machine": "本机",
    "  [the course is tested with {version}]": "  [课程在 {version} 上测试]",
    "torch build": "torch 构建",
    "CUDA {cuda}, MKL {mkl}, OpenMP {openmp}, {threads} intra-op threads":
        "CUDA {cuda}，MKL {mkl}，OpenMP {openmp}，算子内线程 {threads} 个",
    "none (CPU build)": "无（CPU 版）",
    "float kernels": "浮点内核",
    " (forced by ATEN_CPU_CAPABILITY={env})": "（由 ATEN_CPU_CAPABILITY={env} 指定）",
    " (the widest this CPU allows; ATEN_CPU_CAPABILITY=avx2/default narrows it)":
        "（这颗 CPU 支持的最宽指令集；ATEN_CPU_CAPABILITY=avx2/default 可以收窄）",
    "{dist}: gloo {gloo}, NCCL {nccl}": "{dist}；其中 gloo {gloo}，NCCL {nccl}",
    "CPU features": "CPU 特性",
    "none of avx2/avx512/amx/asimd": "avx2/avx512/amx/asimd 都没有",
    "  [AVX-512: wider float kernels, last digits differ from AVX2]": "  [AVX-512：浮点内核更宽，末几位数字与 AVX2 不同]",
    "cores": "核数",
    "{logical} logical, {usable} usable by this process": "逻辑核 {logical} 个，本进程可用 {usable} 个",
    "memory": "内存",
    "{total} total, {available} available": "共 {total}，可用 {available}",
    " (cgroup limit {limit})": "（cgroup 上限 {limit}）",
    "shared memory": "共享内存",
    "none (/dev/shm missing)": "无（没有 /dev/shm）",
    "/dev/shm {total}, {free} free": "/dev/shm {total}，空闲 {free}",
    "  [small: enough for gloo on CPU; NCCL wants docker --shm-size=1g or more]":
        "  [偏小：CPU 上的 gloo 够用；NCCL 需要 docker --shm-size=1g 或更大]",
    "what the course can run here:": "课程在这里能运行什么：",
    "every chapter": "全部章节",
    "yes: up to {ranks} ranks at once on gloo (CPU), about {need:g} GB free needed":
        "能：gloo（CPU）上同时最多 {ranks} 个 rank，约需 {need:g} GB 空闲内存",
    "NO: up to {ranks} ranks at once on gloo (CPU), about {need:g} GB free needed":
        "不能：gloo（CPU）上同时最多 {ranks} 个 rank，约需 {need:g} GB 空闲内存",
    ", {available} available": "，可用 {available}",
    "note": "注意",
    "1 usable core: the chapters run, several times slower than on 2": "只有 1 个可用核：各章能运行，但比 2 个核慢好几倍",
    "NCCL crews": "NCCL 上的 Crew",
    "up to {n} ranks, one GPU each (backend='auto' picks NCCL when every rank gets a GPU)":
        "最多 {n} 个 rank，每个一块 GPU（每个 rank 都分得到 GPU 时，backend='auto' 选 NCCL）",
    "no ({why}): backend='auto' runs every crew on gloo, as the stored chapters were":
        "不能（{why}）：backend='auto' 让每个 Crew 都跑在 gloo 上，存储的各章输出也是这样跑出来的",
    "no CUDA GPU": "没有 CUDA GPU",
    "torch has no NCCL": "torch 没有 NCCL",
    "learner's check": "学员自检",
}

# -- zerolab.crew: what a notebook shows when a rank raises, dies or hangs (crew_limits.py, crew.py) ---
ZH["crew"] = {
    "zerolab.launch: torchrun gives world size {got}, not {asked}; using {got}":
        "zerolab.launch：torchrun 给的 world size 是 {got}，不是 {asked}；按 {got} 运行",
    "rank {rank} raised {type}: {message}": "rank {rank} 抛出了 {type}：{message}",
    "(ranks that failed: {ranks}{others})": "（失败的 rank：{ranks}{others}）",
    "--- traceback from rank {rank} ---": "--- rank {rank} 的回溯 ---",
    "(none: the process ended without a Python exception; what it printed is above)":
        "（没有：进程结束时没有 Python 异常；它打印的内容在上面）",
    "; ranks {ranks} were still running and were stopped": "；rank {ranks} 当时还在运行，已被停止",
    "rank {rank} died {during}": "rank {rank} 在{during}意外退出",
    "rank {rank} died (exit code {code}) {during}": "rank {rank} 在{during}意外退出（退出码 {code}）",
    "during start": "启动时",
    "during run": "运行任务时",
    "ranks {ranks} did not finish within {timeout:g} s; the crew was stopped (every rank process killed). A hung "
    "collective usually means the ranks did not all call the same collectives in the same order.":
        "rank {ranks} 没能在 {timeout:g} s 内完成；这个 Crew 已停止（每个 rank 进程都被杀掉了）。"
        "集合通信卡住，通常是因为各 rank 没有按相同的顺序调用相同的集合通信。",
    "a crew of {asked} ranks was asked for, but {source} allows at most {allowed} here. Run the cell with N <= "
    "{allowed} (chapter 0: N = {allowed} at the top; docs/INSTRUCTOR.md lists what each chapter can do): its "
    "claims are formula against measurement at the N it runs, so they hold, but its output will differ from the "
    "stored one (made with the default N)":
        "要的是 {asked} 个 rank 的 Crew，但 {source} 在这里最多只允许 {allowed} 个。请用 N <= {allowed} 运行这个单元格"
        "（第 0 章：在开头设 N = {allowed}；docs/INSTRUCTOR.md 列出了每章能做什么）：这个单元格的结论都是公式与"
        "它所用 N 下实测值的对照，所以依然成立，只是输出会与存储的输出（用默认的 N 得到）不同",
    "zerolab: {cap} ranks instead of {sizes} ({source}); what follows is measured at N = {cap}":
        "zerolab：用 {cap} 个 rank 而不是 {sizes} 个（{source}）；下面是在 N = {cap} 时测得的",
    "zerolab: crews of {kept} only, not {dropped} ({source})": "zerolab：Crew 只取这些 rank 数：{kept}；跳过 {dropped}（{source}）",
    "no size": "无",
    # asked for a crew that cannot be
    "backend must be 'auto', 'gloo', 'nccl' or 'shm' (zerolab's shared-memory collectives for CPU ranks on one "
    "machine), not {backend}":
        "backend 只能是 'auto'、'gloo'、'nccl' 或 'shm'（zerolab 的共享内存集合通信，用于同一台机器上的 CPU rank），"
        "不能是 {backend}",
    "backend='nccl' needs {n} GPUs; this machine has {gpus}": "backend='nccl' 需要 {n} 块 GPU；这台机器只有 {gpus} 块",
    "set_max_ranks needs a whole number >= 1 or None, not {value}": "set_max_ranks 需要 >= 1 的整数或 None，不能是 {value}",
    "{env}={value}: it must be a whole number >= 1 (or unset: no cap)": "{env}={value}：它必须是 >= 1 的整数（不设置则不限制）",
    "world_size must be >= 1, got {n}": "world_size 必须 >= 1，实际是 {n}",
    "Crew(nodes={nodes}): nodes must be a whole number >= 1 that divides world_size={n} (each node holds "
    "world_size // nodes consecutive ranks, as under torchrun); e.g. Crew({n}, nodes=1)":
        "Crew(nodes={nodes})：nodes 必须是 >= 1 且能整除 world_size={n} 的整数（每个节点容纳 world_size // nodes 个"
        "连续的 rank，与 torchrun 相同）；例如 Crew({n}, nodes=1)",
}

# -- the DeepSpeed config's reader: a bad key, a bad value, a refused key (config_types, config_parse, config_keys)
ZH["config"] = {
    "{n} problems in the DeepSpeed config:": "DeepSpeed 配置里有 {n} 处问题：",
    # what a value must be ('{key}' must be {expected}, got {value})
    "'{key}' must be {expected}, got {value}": "'{key}' 应为{expected}，实际是 {value}",
    "true or false": " true 或 false",
    "an integer": "整数",
    " in {lo}..{hi}": "（取值 {lo}..{hi}）",
    " > 0": "（大于 0）",
    " >= {lo}": "（不小于 {lo}）",
    "a number": "数值",
    " in [{lo:g}, {hi:g}]": "（取值在 [{lo:g}, {hi:g}] 内）",
    " >= {lo:g}": "（不小于 {lo:g}）",
    "one of {options}": " {options} 之一",
    " or null": "，或 null",
    "a string": "字符串",
    "two numbers in [0, 1), like [0.9, 0.999]": "两个 [0, 1) 内的数，例如 [0.9, 0.999]",
    "two numbers in [0, 1)": "两个 [0, 1) 内的数",
    " when dynamic loss scaling is on (fp16 enabled, loss_scale 0)": "，在开启动态损失缩放时（fp16 已启用、loss_scale 为 0）",
    "'{key}' is \"auto\": \"auto\" is filled in by the Hugging Face Trainer before DeepSpeed sees the config, and "
    "zerolab reads the config as DeepSpeed does; give {expected} instead":
        "'{key}' 是 \"auto\"：\"auto\" 由 Hugging Face Trainer 在 DeepSpeed 读到配置之前填好，而 zerolab 像 DeepSpeed "
        "一样直接读配置；请改为给出{expected}",
    "'{key}' must be a JSON object ({{...}}), got {value}": "'{key}' 应为 JSON 对象（{{...}}），实际是 {value}",
    # a key that is not DeepSpeed's, removed from it, or not implemented in zerolab
    "unknown key '{key}' in {where}; {hint}": "{where} 里有未知的键 '{key}'；{hint}",
    "the DeepSpeed config": "DeepSpeed 配置",
    "did you mean '{guess}'?": "你是不是想写 '{guess}'？",
    "known keys: {names}": "已知的键：{names}",
    "it is not a DeepSpeed 0.19.8 key": "它不是 DeepSpeed 0.19.8 的键",
    "'{key}' was removed from DeepSpeed itself ({what}); DeepSpeed 0.19.8 rejects it too":
        "'{key}' 已从 DeepSpeed 本身移除（{what}）；DeepSpeed 0.19.8 同样拒绝它",
    "'{path}' is a DeepSpeed key that zerolab does not implement yet ({what}): {here}{fix}":
        "'{path}' 是 zerolab 尚未实现的 DeepSpeed 键（{what}）：{here}{fix}",
    "it is {value} here; ": "这里它的值是 {value}；",
    "remove it or set it to {value}": "删掉它，或设为 {value}",
    "remove it": "删掉它",
    # the file, the world size
    "world_size must be a positive integer (the data-parallel size), got {value}":
        "world_size 应为正整数（数据并行的规模），实际是 {value}",
    "a DeepSpeed config must be a dict or the path to a JSON file, got {type}":
        "DeepSpeed 配置应为 dict 或 JSON 文件的路径，实际是 {type}",
    "duplicate key '{key}' in the DeepSpeed config file {path}": "DeepSpeed 配置文件 {path} 里有重复的键 '{key}'",
    "cannot read the DeepSpeed config file {path}: {error}": "无法读取 DeepSpeed 配置文件 {path}：{error}",
    "the DeepSpeed config file {path} is not valid JSON: {error}": "DeepSpeed 配置文件 {path} 不是合法的 JSON：{error}",
    # precision
    "give only one of 'bf16' and 'bfloat16' (the old name of the same block)":
        "'bf16' 和 'bfloat16' 只能给一个（后者是同一个块的旧名字）",
    "'fp16.enabled' and '{bf16}.enabled' are both true: bfloat16 and fp16 modes cannot be enabled together "
    "(DeepSpeed asserts the same); pick one":
        "'fp16.enabled' 和 '{bf16}.enabled' 都是 true：bfloat16 和 fp16 模式不能同时启用（DeepSpeed 也会断言失败）；"
        "二选一",
    # the batch triple
    "these three fit world_size {fits}, not {world}": "这三个数对应的 world_size 是 {fits}，不是 {world}",
    "gradient_accumulation_steps was derived as {tbs} // {micro} // {world} = {gas}; train_batch_size must be a "
    "multiple of train_micro_batch_size_per_gpu * world_size = {step}":
        "gradient_accumulation_steps 推导为 {tbs} // {micro} // {world} = {gas}；train_batch_size 必须是 "
        "train_micro_batch_size_per_gpu * world_size = {step} 的倍数",
    "train_micro_batch_size_per_gpu was derived as {tbs} // {world} // {gas} = {micro}; train_batch_size must be a "
    "multiple of gradient_accumulation_steps * world_size = {step}":
        "train_micro_batch_size_per_gpu 推导为 {tbs} // {world} // {gas} = {micro}；train_batch_size 必须是 "
        "gradient_accumulation_steps * world_size = {step} 的倍数",
    "with only train_batch_size given, gradient_accumulation_steps is 1 and train_micro_batch_size_per_gpu = {tbs} "
    "// {world} = {micro}; train_batch_size must be a multiple of world_size = {world}":
        "只给了 train_batch_size 时，gradient_accumulation_steps 为 1，train_micro_batch_size_per_gpu = {tbs} "
        "// {world} = {micro}；train_batch_size 必须是 world_size = {world} 的倍数",
    "either train_batch_size or train_micro_batch_size_per_gpu needs to be provided (DeepSpeed derives the rest of "
    "the batch triple from them); the config has {has}":
        "train_batch_size 和 train_micro_batch_size_per_gpu 至少要给一个（DeepSpeed 由它们推导批大小三元组的其余部分）；"
        "这个配置里{has}",
    "only gradient_accumulation_steps": "只有 gradient_accumulation_steps",
    "none of the three": "三个都没有",
    "check the batch parameters: train_batch_size is not equal to train_micro_batch_size_per_gpu * "
    "gradient_accumulation_steps * world_size: {tbs} != {micro} * {gas} * {world}":
        "检查批大小参数：train_batch_size 不等于 train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
        "world_size：{tbs} != {micro} * {gas} * {world}",
    " ({note})": "（{note}）",
    # zero_optimization and its offload blocks
    "'{key}' = {value} is DeepSpeed's deprecated boolean form; write {{\"stage\": 1}} or {{\"stage\": 0}}":
        "'{key}' = {value} 是 DeepSpeed 已弃用的布尔写法；请写 {{\"stage\": 1}} 或 {{\"stage\": 0}}",
    "give only one of '{path}.{short}' and '{path}.{long}' (the same setting)":
        "'{path}.{short}' 和 '{path}.{long}' 只能给一个（它们是同一个设置）",
    "'{path}.zero_quantized_gradients' needs '{path}.reduce_scatter' true (DeepSpeed 0.19.8's stage 3 asserts it: "
    "qgZ replaces the reduce-scatter); remove reduce_scatter: false or turn qgZ off":
        "'{path}.zero_quantized_gradients' 要求 '{path}.reduce_scatter' 为 true（DeepSpeed 0.19.8 的 stage 3 会断言："
        "qgZ 取代的正是 reduce-scatter）；去掉 reduce_scatter: false，或关掉 qgZ",
    "'{path}.ratio' < 1 (partial offload) needs ZeRO stage 3, as in DeepSpeed; stage is {stage}":
        "'{path}.ratio' < 1（部分卸载）需要 ZeRO stage 3，与 DeepSpeed 相同；现在是 stage {stage}",
    "partial offload, ZeRO-Offload++ Twin-Flow: only this fraction of the sub-groups steps on the host":
        "部分卸载，即 ZeRO-Offload++ Twin-Flow：只有这个比例的子组在主机上做优化器更新",
    "'{path}.device' is \"nvme\" but '{path}.nvme_path' is not set: give the folder (on a fast disk) where the "
    "swapped tensors go":
        "'{path}.device' 是 \"nvme\"，但没有设置 '{path}.nvme_path'：请给出换出张量存放的文件夹（放在快速磁盘上）",
    "'{path}' needs a ZeRO stage of at least 1 (stage is 0): the offloaded step is ZeRO's optimizer, as in DeepSpeed":
        "'{path}' 需要 ZeRO stage 至少为 1（现在是 0）：卸载出去的更新就是 ZeRO 的优化器，与 DeepSpeed 相同",
    "'{path}' offloads the parameter shards of ZeRO stage 3; stage is {stage} (DeepSpeed ignores it there: remove "
    "it, or use stage 3)":
        "'{path}' 卸载的是 ZeRO stage 3 的参数分片；现在是 stage {stage}（DeepSpeed 在这里会忽略它：删掉它，"
        "或者改用 stage 3）",
    # optimizer and scheduler
    "'optimizer' has no 'type' (like \"AdamW\"); give one, or drop the block and pass an optimizer":
        "'optimizer' 没有 'type'（比如 \"AdamW\"）；请补上 type，或者去掉这个块、直接传入一个优化器",
    "the {name} optimizer; zerolab builds Adam, AdamW and SGD": "{name} 优化器；zerolab 能构建 Adam、AdamW 和 SGD",
    "unknown optimizer type '{kind}' in 'optimizer.type'; {hint}": "'optimizer.type' 里的优化器类型 '{kind}' 未知；{hint}",
    "zerolab builds Adam, AdamW and SGD": "zerolab 能构建 Adam、AdamW 和 SGD",
    "'optimizer.params.nesterov' needs momentum > 0 and dampening 0 (torch.optim.SGD refuses otherwise)":
        "'optimizer.params.nesterov' 要求 momentum > 0 且 dampening 为 0（否则 torch.optim.SGD 会拒绝）",
    "'scheduler' has no 'type' (like \"WarmupLR\"): DeepSpeed would quietly run without a scheduler; give one, or "
    "drop the block":
        "'scheduler' 没有 'type'（比如 \"WarmupLR\"）：DeepSpeed 会不声不响地在没有调度器的情况下运行；请补上 type，或者去掉这个块",
    "unknown scheduler type '{kind}' in 'scheduler.type'; {hint}": "'scheduler.type' 里的调度器类型 '{kind}' 未知；{hint}",
    "DeepSpeed's are {names}, or the name of a torch.optim.lr_scheduler class":
        "DeepSpeed 的调度器有 {names}，也可以是 torch.optim.lr_scheduler 里某个类的名字",
    "unknown key '{key}' in 'scheduler.params' for {kind}; {hint}": "{kind} 的 'scheduler.params' 里有未知的键 '{key}'；{hint}",
    "its params are {names}": "它的参数有 {names}",
    "'scheduler.params.{key}' is missing: {kind} needs it (it has no default in DeepSpeed either)":
        "缺少 'scheduler.params.{key}'：{kind} 需要它（DeepSpeed 里它也没有默认值）",
    # what each refused or removed key does in DeepSpeed (config_keys' tables: NOT_IMPLEMENTED, REMOVED)
    "activation checkpointing / partitioning": "激活检查点 / 激活分片",
    "FLOPs profiler": "FLOPs 分析器",
    "TensorBoard monitor": "TensorBoard 监控",
    "Weights & Biases monitor": "Weights & Biases 监控",
    "CSV monitor": "CSV 监控",
    "Comet monitor": "Comet 监控",
    "communication logger; zerolab's own comm ledger records every collective": "通信日志；zerolab 自己的通信账本会记录每一次集合通信",
    "autotuner": "自动调优器",
    "RLHF hybrid engine": "RLHF 混合引擎",
    "torch.autocast mixed precision": "torch.autocast 混合精度",
    "data sampling / routing library": "数据采样 / 路由库",
    "torch.compile / DeepCompile integration": "torch.compile / DeepCompile 集成",
    "tensor parallelism (AutoTP)": "张量并行（AutoTP）",
    "expert parallelism": "专家并行",
    "pipeline parallelism": "流水线并行",
    "checkpoint tag validation / universal checkpoints / writers": "检查点标签校验 / 通用检查点 / 写入器",
    "grad_accum_dtype / param_dtype / buffer_dtype overrides": "覆盖 grad_accum_dtype / param_dtype / buffer_dtype",
    "weight quantization": "权重量化",
    "DataStates asynchronous checkpointing": "DataStates 异步检查点",
    "divide gradients by world size before the all-reduce": "在 all-reduce 之前把梯度除以 world size",
    "split the 1/world_size division around the collective": "把 1/world_size 的除法拆到集合通信的前后",
    "sum instead of mean of gradients across ranks": "各 rank 的梯度求和而不是求平均",
    "broadcast instead of all-gather (stage 0)": "用 broadcast 代替 all-gather（stage 0）",
    "engine-managed Python garbage collection": "由引擎管理 Python 垃圾回收",
    "sequence parallelism (Ulysses)": "序列并行（Ulysses）",
    "expert/data parallel group order": "专家并行组与数据并行组的顺序",
    "false hands the accumulation boundary to the caller": "设为 false 时由调用方决定累积边界",
    "NVIDIA Apex AMP; use 'fp16' or 'bf16'": "NVIDIA Apex AMP；请用 'fp16' 或 'bf16'",
    "elastic training; set the batch triple directly": "弹性训练；请直接设置批大小三元组",
    "legacy curriculum learning; DeepSpeed moved it into 'data_efficiency'": "旧版课程学习；DeepSpeed 已把它移进 'data_efficiency'",
    "Nebula checkpointing": "Nebula 检查点",
    "compression library": "压缩库",
    "MoQ quantized training": "MoQ 量化训练",
    "sparse embedding gradients": "嵌入层的稀疏梯度",
    "eigenvalue MoQ": "基于特征值的 MoQ",
    "sparse attention": "稀疏注意力",
    "graph harvesting": "计算图采集（graph harvesting）",
    "progressive layer drop": "渐进式层丢弃",
    "save_16bit_model() gathers the weights": "save_16bit_model() 收集完整权重",
    "deprecated name of the key above": "上面那个键已弃用的旧名字",
    "fetch fine-grained modules as one unit": "把细粒度的模块合成一个单元来取参数",
    "fetch parameters with all-reduce": "用 all-reduce 取参数",
    "unbucketed, per-parameter all-gathers": "不分桶、逐个参数的 all-gather",
    "legacy elastic checkpoints": "旧版弹性检查点",
    "old stage-1 implementation": "旧的 stage 1 实现",
    "false skips the global gradient norm": "设为 false 时跳过全局梯度范数",
    "16-byte alignment padding in flat buffers": "扁平缓冲区里的 16 字节对齐填充",
    "ZeRO++ frozen weights stored quantized (zerolab partitions and gathers frozen parameters in their model dtype)":
        "ZeRO++ 把冻结权重以量化形式存储（zerolab 按模型的 dtype 对冻结参数做分片和收集）",
    "pipeline-mode checkpoint loading": "流水线模式的检查点加载",
    "Muon momentum buffer placement": "Muon 动量缓冲区的放置",
    "ZenFlow asynchronous offloaded updates": "ZenFlow 异步卸载更新",
    "user-listed ZeRO-3 leaf modules": "用户列出的 ZeRO-3 叶子模块",
    "deprecated form of offload_optimizer": "offload_optimizer 已弃用的旧写法",
    "deprecated form of offload_param": "offload_param 已弃用的旧写法",
    "deprecated pin_memory for the keys above": "上面那些键已弃用的 pin_memory",
    "MiCS sharding": "MiCS 分片",
    "LoCo-ZeRO++": "LoCo-ZeRO++（带误差补偿的低比特通信）",
    "casts the floating-point inputs of the model's forward to fp16": "把模型前向的浮点输入转换为 fp16",
    "fp16 master weights": "fp16 主权重",
    "bf16 master weights": "bf16 主权重",
    "bf16 optimizer states": "bf16 优化器状态",
    "SuperOffload (Grace-Hopper CPU optimizer)": "SuperOffload（Grace-Hopper 上的 CPU 优化器）",
    "legacy fused optimizer": "旧版融合优化器",
    "Adam without bias correction": "不做偏差校正的 Adam",
    "AMSGrad": "AMSGrad 变体",
    "as an optimizer parameter; use the top-level 'gradient_clipping'": "不再作为优化器参数；请改用顶层的 'gradient_clipping'",
    "gradient ascent": "梯度上升",
    # what a key with no effect in zerolab does in DeepSpeed (config_keys' NO_EFFECT rows; zerolab explain, the
    # engine's warning)
    "libaio setting, read only by NVMe offload": "libaio 的设置，只有 NVMe 卸载才读",
    "read only by DeepSpeed's BF16_Optimizer, which needs 'data_types'":
        "只有 DeepSpeed 的 BF16_Optimizer 才读，而它要靠 'data_types' 启用",
    "sizes DeepSpeed's pool of NVMe swap buffers; zerolab allocates each sub-group's buffers as it swaps it "
    "(sub_group_size bounds them), so the pool size changes nothing":
        "决定 DeepSpeed 的 NVMe 交换缓冲池有多大；zerolab 在换入换出每个子组时才分配它的缓冲区（大小受 "
        "sub_group_size 限制），所以缓冲池的大小不影响任何东西",
    "speeds up DeepSpeed's first NVMe write of the states; same numbers": "加快 DeepSpeed 第一次把状态写到 NVMe；数值不变",
    "the share of cores DeepSpeedCPUAdam uses; zerolab's host step runs torch's optimizer on torch's threads":
        "DeepSpeedCPUAdam 使用的 CPU 核比例；zerolab 的主机端更新用 torch 的优化器，跑在 torch 自己的线程上",
    "DeepSpeed logs progress every N steps; logging only, zerolab prints no progress lines":
        "DeepSpeed 每 N 步打印一次进度；只影响日志，zerolab 不打印进度行",
    "DeepSpeed times forward/backward/step and logs it; timing logs only":
        "DeepSpeed 给前向、反向和更新计时并写进日志；只影响计时日志",
    "DeepSpeed insists on DeepSpeedCPUAdam under optimizer offload; zerolab's host step runs the torch optimizer you "
    "chose, so there is nothing to force":
        "优化器卸载时 DeepSpeed 坚持用 DeepSpeedCPUAdam；zerolab 的主机端更新跑的就是你选的 torch 优化器，没什么可强制的",
    "logging only": "只影响日志",
    "timer logging only": "只影响计时日志",
    "only a tensor-core alignment warning": "只用于一条 Tensor Core 对齐的警告",
    "read only by sequence parallelism, which zerolab refuses": "只有序列并行才读，而 zerolab 不支持序列并行",
    "libaio settings of DeepSpeed's NVMe offload; zerolab's NVMe I/O runs on Python threads and does not read them":
        "DeepSpeed 的 NVMe 卸载所用的 libaio 设置；zerolab 的 NVMe 读写跑在 Python 线程上，不读这些设置",
    "read only together with sequence_parallel_size, which zerolab refuses":
        "只和 sequence_parallel_size 一起读，而 zerolab 不支持 sequence_parallel_size",
    "read only by the autotuner, which zerolab refuses": "只有自动调优器才读，而 zerolab 不支持自动调优器",
    "zerolab always packs gradients into flat buckets (what true does); false in DeepSpeed changes only the memory "
    "layout, never the numbers":
        "zerolab 总是把梯度装进扁平的桶里（相当于 true）；在 DeepSpeed 里设为 false 只改变内存布局，不改变数值",
    "zerolab all-gathers updated parameters one bucket (stages 1-2) or one module (stage 3) at a time; DeepSpeed "
    "0.19.8 itself ignores it on current torch (one all_gather_into_tensor per parameter group); same numbers":
        "zerolab 每次 all-gather 一个桶（stage 1-2）或一个模块（stage 3）的更新后参数；在当前的 torch 上 "
        "DeepSpeed 0.19.8 自己也忽略它（每个参数组一次 all_gather_into_tensor）；数值不变",
    "DeepSpeed 0.19.8 parses it but no optimizer reads it (only the autotuner lists it): it has no effect in "
    "DeepSpeed either; zerolab all-gathers the updated partitions, as DeepSpeed does":
        "DeepSpeed 0.19.8 会解析它，但没有哪个优化器读它（只有自动调优器列出它）：在 DeepSpeed 里同样不起作用；"
        "zerolab 和 DeepSpeed 一样 all-gather 更新后的分区",
    "read only when loading a DeepSpeed checkpoint": "只在加载 DeepSpeed 检查点时才读",
    "stage 3's own torch.nn.functional.linear, DeepSpeed's: on 3-D inputs the bias added after the matmul, the weight gradient summed its own way (the last bits differ from torch's); DeepSpeed for the whole process, zerolab while the model's forward and backward run":
        "stage 3 自己的 torch.nn.functional.linear，即 DeepSpeed 的：三维输入时先做矩阵乘再加偏置，权重梯度按它自己的方式求和"
        "（最后几位与 torch 的不同）；DeepSpeed 对整个进程生效，zerolab 只在模型的前向和反向运行时生效",
    "DeepSpeed's stage-3 module.apply patch": "DeepSpeed 在 stage 3 下对 module.apply 打的补丁",
    "debug checks only": "只用于调试检查",
    "at stages 1-2 DeepSpeed deals the gradients of a bucket to the ranks in turn, to spread the offload's "
    "device-to-host copies over ranks (stage 3 ignores it); which rank owns which element changes, the numbers do "
    "not; zerolab keeps the order":
        "在 stage 1-2，DeepSpeed 把一个桶里的梯度轮流分给各个 rank，好让卸载时从设备到主机的拷贝分摊到各个 rank"
        "（stage 3 忽略它）；变的只是哪个元素归哪个 rank，数值不变；zerolab 保持原来的顺序",
    "read by DeepSpeed's stage 3 only; at stages 0-2 it changes nothing (in DeepSpeed too)":
        "只有 DeepSpeed 的 stage 3 才读；在 stage 0-2 它什么也不改变（在 DeepSpeed 里也一样）",
    "tunes the offload when its device is \"cpu\" or \"nvme\"; with device \"none\" it does nothing (in DeepSpeed too)":
        "在卸载设备为 \"cpu\" 或 \"nvme\" 时调节卸载；设备为 \"none\" 时什么也不做（在 DeepSpeed 里也一样）",
    "torch's AdamW/Adam instead of FusedAdam: the same update, but an AdamW without 'weight_decay' takes torch's default, 0.01":
        "用 torch 的 AdamW/Adam 代替 FusedAdam：更新方式相同，但没写 'weight_decay' 的 AdamW 会用 torch 的默认值 0.01",
    "read only by DeepSpeedCPUAdam; zerolab's host step keeps fp32 states":
        "只有 DeepSpeedCPUAdam 才读；zerolab 的主机端更新始终以 fp32 保存优化器状态",
    "torch implementation choice; same update": "只是选择 torch 的哪种实现；更新结果相同",
    "autograd through the step; unused by training": "让优化器更新本身也能被 autograd 求导；训练用不到",
}

# -- zerolab.course.checks: what every exercise check shows ---------------------------------------------------
ZH["checks"] = {
    "PASSED: {message}": "PASSED（通过）：{message}",
    "{what} failed on the ranks: {first}\n  hint: {hint}": "{what}，在各 rank 上失败：{first}\n  提示：{hint}",
    "  ... ({n} more lines)": "  ……（还有 {n} 行）",
    "(the full traceback: run zerolab.course.checks.full_tracebacks(), then this cell again)":
        "（完整的回溯：运行 zerolab.course.checks.full_tracebacks()，再运行一次这个单元格）",
    "(the full traceback and the rank's traceback: run zerolab.course.checks.full_tracebacks(), then this cell again)":
        "（完整的回溯以及该 rank 的回溯：运行 zerolab.course.checks.full_tracebacks()，再运行一次这个单元格）",
}

# -- exercise 0: the ring all-gather ------------------------------------------------------------------
ZH["checks.ch00"] = {
    "hint: in step s, rank r sends the chunk it got most recently (its own, chunk r, at step 0),\n  that is "
    "chunk (r - s) % N, and receives chunk (r - s - 1) % N from the left; N-1 steps in all":
        "提示：第 s 步，rank r 发出它最近收到的那一块（第 0 步发它自己的第 r 块），\n  也就是第 (r - s) % N 块，"
        "同时从左边收到第 (r - s - 1) % N 块；一共 N-1 步",
    "only the placeholder -1 (nothing arrived in it)": "占位用的 -1（什么也没收到）",
    "chunk {c}'s data": "第 {c} 块的数据",
    "values that are no chunk's data": "不属于任何一块的数值",
    "world size {n}, rank {r}": "总 rank 数 {n}，rank {r}",
    "world size {n}: {error}": "总 rank 数 {n}：{error}",
    "world size {n}": "总 rank 数 {n}",
    "{where}: your ring_all_gather raised {name}: {error}\n"
    "  hint: the error is in your function; the full traceback shows the line":
        "{where}：你的 ring_all_gather 抛出了 {name}：{error}\n  提示：错误在你的函数里；完整的回溯会指出是哪一行",
    "world size {n}: the ranks called send_recv different numbers of times ({counts}); every rank must take "
    "the same N-1 = {steps} steps.":
        "总 rank 数 {n}：各个 rank 调用 send_recv 的次数不一样（{counts}）；每个 rank 都必须走同样的 N-1 = {steps} 步。",
    "{where}: return the list of {n} chunks (got {type})": "{where}：应返回含 {n} 块的列表（拿到的是 {type}）",
    "{where}: chunk {c} should have shape {want}, got {shape}": "{where}：第 {c} 块的形状应为 {want}，实际是 {shape}",
    "{where}: chunk {c} holds {holds},\n  but dist.all_gather gives chunk {c}'s data.\n  What rank {r} did: {schedule}.":
        "{where}：第 {c} 块里是{holds}，\n  而 dist.all_gather 给出的是第 {c} 块的数据。\n  rank {r} 做了什么：{schedule}。",
    "{where}: the chunks are right, but the traffic is not a ring's: rank {r} called send_recv {calls} times and "
    "sent {sent} elements; a ring all-gather takes N-1 = {steps} steps and sends every chunk except the one it "
    "receives last: {should} of {numel} elements.\n  What rank {r} did: {schedule}.":
        "{where}：各块都对，但通信量不是环形算法的：rank {r} 调用了 {calls} 次 send_recv，发出 {sent} 个元素；"
        "环形 all-gather 走 N-1 = {steps} 步，除了最后收到的那一块，每块都发出一次：{numel} 个元素中的 {should} 个。"
        "\n  rank {r} 做了什么：{schedule}。",
    "world size {n}: ranks {ranks} were still waiting after {timeout:g} s: every rank must call send_recv the "
    "same number of times (N-1).":
        "总 rank 数 {n}：{timeout:g} 秒后 rank {ranks} 仍在等待：每个 rank 调用 send_recv 的次数必须相同（N-1 次）。",
    "a rank raised inside the check's ring; full_tracebacks() shows the line":
        "某个 rank 在检查程序的环里抛出了异常；full_tracebacks() 会指出是哪一行",
    "ring_all_gather is not written yet (NotImplementedError on world size {n}).":
        "ring_all_gather 还没有写（总 rank 数 {n} 时抛出了 NotImplementedError）。",
    "N={n}: {numel} float32 elements in chunks of {sizes}; bytes sent by rank: {per_rank}":
        "N={n}：{numel} 个 float32 元素，各块大小 {sizes}；各 rank 发出的字节数：{per_rank}",
    "your ring all-gather equals dist.all_gather on every rank, in N-1 steps of one chunk:":
        "你的环形 all-gather 在每个 rank 上都与 dist.all_gather 相同，共 N-1 步，每步一块：",
}

# -- exercise 1: weigh the backpack --------------------------------------------------------------------
ZH["checks.ch01"] = {
    # the giants (zerolab.course.checks.ch01.NAMES)
    "parameters (the furniture)": "参数（家具）",
    "gradients (the door stickers)": "梯度（搬迁贴纸）",
    "optimizer states (the heavy notebook)": "优化器状态（小本子）",
    "your number is {n} times too big: stage {stage} splits the {name} among the {n} ranks, so each keeps "
    "1/{n} of them (divide by world_size)":
        "你的数是实测的 {n} 倍：stage {stage} 把{name}分给 {n} 个 rank，每个只保留 1/{n}（要除以 world_size）",
    "your number is {n} times too small: stage {stage} does not split the {name}; every rank carries all of them":
        "你的数只有实测的 1/{n}：stage {stage} 不拆分{name}，每个 rank 都背着全部",
    "every parameter is stored once in the training precision: 4 bytes in fp32, 2 bytes in fp16/bf16 "
    "(the fp32 master copy belongs to the optimizer states)":
        "每个参数按训练精度存一份：fp32 下 4 字节，fp16/bf16 下 2 字节（fp32 主权重算在优化器状态里）",
    "there is one gradient per parameter, in the same dtype as the parameters: 4 bytes in fp32, 2 bytes in "
    "fp16/bf16":
        "每个参数一个梯度，dtype 与参数相同：fp32 下 4 字节，fp16/bf16 下 2 字节",
    "in mixed precision the optimizer keeps an fp32 master copy of the weights besides Adam's fp32 momentum and "
    "variance: 4 + 4 + 4 = 12 bytes per parameter":
        "混合精度下，除了 Adam 的 fp32 动量和方差，优化器还要保留一份 fp32 主权重：每个参数 4 + 4 + 4 = 12 字节",
    "Adam keeps two fp32 numbers per parameter, momentum and variance: 4 + 4 = 8 bytes (in fp32 training the "
    "parameters themselves are the master weights)":
        "Adam 为每个参数保留两个 fp32 数，即动量和方差：4 + 4 = 8 字节（fp32 训练时，参数本身就是主权重）",
    "model_state_bytes_per_rank is not written yet (it raised NotImplementedError: {error}). Fill in the cell "
    "above, run it, then this check again.":
        "model_state_bytes_per_rank 还没有写（它抛出了 NotImplementedError：{error}）。先把上面的单元格补完并运行，"
        "再运行一次这个检查。",
    "{where} raised {name}: {error}\n  hint: call it by hand with these arguments to see the line":
        "{where} 抛出了 {name}：{error}\n  提示：用这些参数手动调用一次，就能看到是哪一行",
    "{where} returned {type}; return a dict with the keys {keys} (bytes per rank)":
        "{where} 返回的是 {type}；应返回一个键为 {keys} 的 dict（每个 rank 的字节数）",
    "{where} has no key {missing}; return a dict with the keys {keys}":
        "{where} 缺少键 {missing}；应返回一个键为 {keys} 的 dict",
    "{where}[{key}] is {value}; it should be a number of bytes": "{where}[{key}] 是 {value}；它应该是一个字节数",
    "the ZeRO paper's Figure 1 (Ψ = 7.5e9, N = 64, mixed precision, stage {stage}) says {want:.1f} GB per GPU; "
    "your function gives {got:.1f} GB (GB = 1e9 bytes)":
        "ZeRO 论文的图 1（Ψ = 7.5e9，N = 64，混合精度，stage {stage}）是每张 GPU {want:.1f} GB；"
        "你的函数给出 {got:.1f} GB（GB = 1e9 字节）",
    "stage {stage}, {precision}, {n} ranks, Adam, Ψ = {psi:,} parameters:":
        "stage {stage}，{precision}，{n} 个 rank，Adam，Ψ = {psi:,} 个参数：",
    "  your parameters and gradients are swapped: {params:,.0f} bytes of parameters, {grads:,.0f} of gradients; "
    "measured the other way round.":
        "  你把参数和梯度弄反了：参数 {params:,.0f} 字节，梯度 {grads:,.0f} 字节；实测正好相反。",
    "    hint: stage 2 splits the gradients (not the parameters); stage 3 splits both":
        "    提示：stage 2 拆分的是梯度（不是参数）；stage 3 两者都拆",
    "  the {name} are off.": "  {name}对不上。",
    "    measured on rank {rank}: {bytes:>12,.0f} bytes ({per:.2f} bytes per parameter)":
        "    rank {rank} 上实测：{bytes:>12,.0f} 字节（每个参数 {per:.2f} 字节）",
    "    your function:      {bytes:>12,.0f} bytes ({per:.2f} bytes per parameter)":
        "    你的函数：     {bytes:>12,.0f} 字节（每个参数 {per:.2f} 字节）",
    "    hint: {hint}": "    提示：{hint}",
    "  also off: {names}": "  另外对不上的：{names}",
    "  (stage 0 is right; the stages split the giants among the ranks: 1 the optimizer states, 2 also the "
    "gradients, 3 also the parameters)":
        "  （stage 0 是对的；各 stage 把巨头分摊给各 rank：1 分摊优化器状态，2 再加上梯度，3 再加上参数）",
    "TinyLM, Ψ = {psi:,} trainable parameters, {n} ranks, Adam; bytes per rank (measured on rank 0 / yours)":
        "TinyLM，Ψ = {psi:,} 个可训练参数，{n} 个 rank，Adam；每个 rank 的字节数（rank 0 实测 / 你的）",
    "your byte count matches the engine's backpacks in {n} configurations on {world} ranks,\n"
    "  and the ZeRO paper's Figure 1 (120 / 31.4 / 16.6 / 1.9 GB)":
        "你算的字节数在 {world} 个 rank 上的 {n} 种配置里都与引擎的背包相符，\n"
        "  也与 ZeRO 论文的图 1 一致（120 / 31.4 / 16.6 / 1.9 GB）",
}

# -- exercise 2: the ring reduce-scatter (and send_recv, which exercise 0 shares) -----------------------
ZH["checks.ch02"] = {
    "Hint: follow one chunk around the ring. Chunk c must visit every rank once and end, fully summed, at rank c "
    "after N-1 steps; each step moves it one rank to the right. So where does chunk c start, and which chunk is "
    "rank r holding on its way at step s? The chunk a rank receives is the one its left neighbour sends.":
        "提示：沿着环跟住一个块。第 c 块每步右移一个 rank，N-1 步里每个 rank 经过一次，最后在 rank c\n"
        "  累加完整。它从哪里出发？第 s 步 rank r 手里传的是哪一块？收到的块就是左边邻居发出的那一块。",
    # send_recv's complaints (on a rank)
    "rank {rank}, step {step}: send_recv takes two tensors, got {a} and {b}":
        "rank {rank}，第 {step} 步：send_recv 接受两个张量，拿到的是 {a} 和 {b}",
    "rank {rank}, step {step}: the receive buffer must be contiguous":
        "rank {rank}，第 {step} 步：接收缓冲区必须是连续的（contiguous）",
    "rank {rank}, step {step}: the left neighbour (rank {left}) sends {sends} elements, but the receive buffer has "
    "{has}: the chunk a rank receives must be the one its left neighbour sends":
        "rank {rank}，第 {step} 步：左边邻居（rank {left}）发来 {sends} 个元素，接收缓冲区却有 {has} 个：\n"
        "  一个 rank 收到的块，必须是它左边邻居发出的那一块",
    "rank {rank}, step {step}: send is {send} but the receive buffer is {recv}; use torch.empty_like on a chunk":
        "rank {rank}，第 {step} 步：发送的是 {send}，接收缓冲区却是 {recv}；\n"
        "  用 torch.empty_like 照着一个块来建接收缓冲区",
    # what a rank did, step by step
    "chunk {c}": "第 {c} 块",
    "a tensor that is not one of the chunks": "一个不属于这些块的张量",
    "step {s}: sent {a}, then changed {changed}": "第 {s} 步发{a}、改{changed}",
    "step {s}: sent {a}, then changed no chunk": "第 {s} 步发{a}、没改任何块",
    "send_recv was never called": "从未调用 send_recv",
    "a value that is not each rank's contribution added once": "一个并非每个 rank 的贡献各加一次的值",
    "the contributions of ranks {present}": "rank {present} 的贡献",
    "the contributions of ranks none": "没有任何 rank 的贡献",
    "; missing ranks {missing}": "；缺了 rank {missing}",
    "world size {n}: {error}": "总 rank 数 {n}：{error}",
    "world size {n}, rank {r}": "总 rank 数 {n}，rank {r}",
    "world size {n}": "总 rank 数 {n}",
    "world size {n}, rank {r}: your ring_reduce_scatter raised {kind}: {error}\n"
    "  hint: the error is in your function; the full traceback shows the line":
        "总 rank 数 {n}，rank {r}：你的 ring_reduce_scatter 抛出了 {kind}：{error}\n"
        "  提示：错误在你的函数里；完整的回溯会指出是哪一行",
    "world size {n}: the ranks called send_recv different numbers of times ({counts}); every rank must take the "
    "same N-1 = {steps} steps.":
        "总 rank 数 {n}：各 rank 调用 send_recv 的次数不同（{counts}）；\n"
        "  每个 rank 都必须走同样的 N-1 = {steps} 步。",
    "{where}: the function must return the list of {n} chunks (got {type})":
        "{where}：函数必须返回含 {n} 块的列表（拿到的是 {type}）",
    "{where}: chunk {r} should be a tensor of shape {want}, got {shape}":
        "{where}：第 {r} 块应是形状为 {want} 的张量，实际是 {shape}",
    "{where}: chunk {r} (elements {first}..{last} of the tensor) is wrong.\n  expected {want}\n  got      {got}\n"
    "  element {bad} of the chunk holds {holds} (it should hold all {n} ranks' contributions, each once).\n"
    "  What rank {r} did: {schedule}.":
        "{where}：第 {r} 块（张量的第 {first}..{last} 个元素）不对。\n  期望 {want}\n  实际 {got}\n"
        "  该块的第 {bad} 个元素里是 {holds}（应当是全部 {n} 个 rank 的贡献，各一次）。\n"
        "  rank {r} 做了什么：{schedule}。",
    "{where}: the values are right, but the traffic is not a ring's: rank {r} called send_recv {calls} times and "
    "sent {sent} elements; a ring reduce-scatter takes N-1 = {steps} steps and sends each chunk except its own "
    "once: {should} of {numel} elements.\n  What rank {r} did: {schedule}.":
        "{where}：数值都对，但通信量不是环形算法的：rank {r} 调用了 {calls} 次 send_recv，\n"
        "  发出 {sent} 个元素；环形 reduce-scatter 走 N-1 = {steps} 步，除自己那块外每块发一次：\n"
        "  {numel} 个元素中的 {should} 个。\n  rank {r} 做了什么：{schedule}。",
    "world size {n}: ranks {ranks} were still waiting after {timeout:g} s. Usually one rank stopped calling "
    "send_recv while its neighbour was still waiting for it: every rank must call send_recv the same number of "
    "times (N-1).":
        "总 rank 数 {n}：{timeout:g} 秒后 rank {ranks} 仍在等待。通常是某个 rank 不再调用 send_recv，\n"
        "  而它的邻居还在等它：每个 rank 调用 send_recv 的次数必须相同（N-1 次）。",
    "a rank raised inside the check's ring; the rank's traceback (full_tracebacks()) names the line":
        "某个 rank 在检查程序的环里抛出了异常；该 rank 的回溯（full_tracebacks()）会指出是哪一行",
    "ring_reduce_scatter is not written yet (NotImplementedError on world size {n}).":
        "ring_reduce_scatter 还没有写（总 rank 数 {n} 时抛出了 NotImplementedError）。",
    "N={n}: {numel} float32 elements ({bytes} B) in chunks of {sizes}: chunk[rank] right on every rank;\n"
    "    sent {per_rank} ((N-1)/N x {bytes} B = {share:.1f} B)":
        "N={n}：{numel} 个 float32 元素（{bytes} B），各块大小 {sizes}：每个 rank 上的 chunk[rank] 都对；\n"
        "    发出 {per_rank}（(N-1)/N x {bytes} B = {share:.1f} B）",
    "world size {n}: DDP (stage 0) with your reduce-scatter as the gradient all-reduce trained TinyLM to "
    "different parameters than single-process training (rank {rank}: max |difference| {diff:.3g}).":
        "总 rank 数 {n}：用你的 reduce-scatter 充当梯度 all-reduce 的 DDP（stage 0）训练出的 TinyLM 参数\n"
        "  与单进程训练不同（rank {rank}：最大 |差| {diff:.3g}）。",
    "N={n}: DDP (zerolab stage 0) on TinyLM, its gradient all-reduce = your reduce-scatter\n"
    "    + a ring all-gather ({calls} calls in {steps} steps, each of {numel:,} elements):\n"
    "    every rank's parameters equal single-process training's to float32 rounding":
        "N={n}：TinyLM 上的 DDP（zerolab stage 0），梯度 all-reduce = 你的 reduce-scatter\n"
        "    + 环形 all-gather（{steps} 步共 {calls} 次调用，每次 {numel:,} 个元素）：\n"
        "    每个 rank 的参数都与单进程训练相同（在 float32 舍入误差以内）",
    "your ring reduce-scatter sums the right chunk on every rank (N = {sizes})\n"
    "  and sends exactly the N-1 chunks a ring sends:":
        "你的环形 reduce-scatter 在每个 rank 上都把正确的块累加好了（N = {sizes}），\n"
        "  而且恰好发出环形算法该发的 N-1 块：",
    # trace_ring
    "ranks {ranks} hung in send_recv: every rank must call it the same number of times":
        "rank {ranks} 卡在 send_recv 里：每个 rank 调用它的次数必须相同",
    "ring_reduce_scatter is not written yet (it raised NotImplementedError).":
        "ring_reduce_scatter 还没有写（它抛出了 NotImplementedError）。",
    "a rank raised while running your function; the rank's traceback (full_tracebacks()) names the line":
        "某个 rank 在运行你的函数时抛出了异常；该 rank 的回溯（full_tracebacks()）会指出是哪一行",
    "each cell: the chunk the rank sent -> the chunk(s) it then added into":
        "每一格：该 rank 发出的块 -> 随后把收到的数据加进去的块",
    "step": "  步",
    "(no step)": "（无此步）",
}

# -- exercise 3: who owns which shard, and AdamW on one shard -----------------------------------------
ZH["checks.ch03"] = {
    # the two layouts (zerolab.course.checks.ch03.LAYOUTS)
    "DeepSpeed's flat buffer": "DeepSpeed 的扁平缓冲区",
    "the paper's buckets": "论文的桶",
    "{what} raised NotImplementedError on the ranks: write the part marked 'Exercise' first.":
        "{what}：各 rank 上抛出了 NotImplementedError：先写标着 'Exercise' 的部分。",
    "the error is raised by your function on a rank; the rank's traceback (zerolab.course.checks.full_tracebacks(), "
    "then run again) names the line":
        "错误出在你的函数里（在某个 rank 上）；运行 zerolab.course.checks.full_tracebacks() 后再运行一次，\n"
        "  该 rank 的回溯会指出是哪一行",
    # (a) the rule
    "shard_range raises NotImplementedError: write the part marked 'Exercise' first":
        "shard_range 抛出了 NotImplementedError：先写标着 'Exercise' 的部分",
    "{call} returned {got}; return a pair of integers (start, end): the elements [start, end) rank {r} owns":
        "{call} 返回了 {got}；应返回一对整数 (start, end)：rank {r} 拥有的元素 [start, end)",
    "padded_numel = {padded:,}, world_size = {n}: ": "padded_numel = {padded:,}，world_size = {n} 时：\n  ",
    "rank {r} gets [{s:,}, {e:,}), which is not inside the buffer [0, {padded:,}). \n"
    "  hint: start <= end, both between 0 and padded_numel":
        "rank {r} 拿到的是 [{s:,}, {e:,})，不在缓冲区 [0, {padded:,}) 之内。\n"
        "  提示：start <= end，且两者都在 0 与 padded_numel 之间",
    "a gap: elements [{pos:,}, {s:,}) have no owner, so no rank would step them and they would never train.\n"
    "  hint: rank r + 1 starts where rank r ends":
        "有空隙：元素 [{pos:,}, {s:,}) 没有归属，\n  没有哪个 rank 会更新它们，它们永远得不到训练。\n"
        "  提示：rank r + 1 从 rank r 结束的地方开始",
    "an overlap: ranks {prev} and {r} both own elements [{s:,}, {e:,}) (rank {prev}: {mine_prev}, rank {r}: "
    "{mine}), so they would be updated twice.\n  hint: rank r + 1 starts where rank r ends":
        "有重叠：rank {prev} 和 rank {r} 都拥有元素 [{s:,}, {e:,})\n"
        "  （rank {prev}：{mine_prev}，rank {r}：{mine}），它们会被更新两次。\n"
        "  提示：rank r + 1 从 rank r 结束的地方开始",
    "a gap at the end: elements [{pos:,}, {padded:,}) have no owner. \n"
    "  hint: the last rank's piece ends at padded_numel":
        "末尾有空隙：元素 [{pos:,}, {padded:,}) 没有归属。\n  提示：最后一个 rank 的那一段结束于 padded_numel",
    "rank {r} owns {numel:,} elements ([{s:,}, {e:,})), but the all-gather after the step collects equal pieces "
    "of padded_numel / world_size = {size:,}.\n  hint: every rank owns exactly padded_numel // world_size elements":
        "rank {r} 拥有 {numel:,} 个元素（[{s:,}, {e:,})），\n"
        "  但更新之后的 all-gather 收集的是等长的片段，每段 padded_numel / world_size = {size:,}。\n"
        "  提示：每个 rank 恰好拥有 padded_numel // world_size 个元素",
    "the pieces tile the buffer, but not in rank order: rank {r} owns [{s:,}, {e:,}), while the all-gather puts "
    "rank {r}'s piece at number {r}, [{start:,}, {end:,}).\n  hint: rank r's piece starts at r * shard size":
        "这些片段铺满了缓冲区，但没按 rank 的顺序：rank {r} 拥有 [{s:,}, {e:,})，\n"
        "  而 all-gather 把 rank {r} 的片段放在第 {r} 段，即 [{start:,}, {end:,})。\n"
        "  提示：rank r 的片段从 r * 分片大小 开始",
    "shard_range: {problem}": "shard_range 不对：{problem}",
    "stage 1 with your shard_range on {n} ranks": "在 {n} 个 rank 上用你的 shard_range 跑 stage 1",
    "shard_range, on a flat buffer the engine really made ({layout}): {problem}":
        "shard_range 用在引擎实际建出的扁平缓冲区上（{layout}）时：\n  {problem}",
    "stage 1 on {n} ranks ({layout}) with your shard_range trained to different parameters than one process: on "
    "rank {rank}, {name} is off by up to {err:.3g} (allowed: {atol:g} + {rtol:g} x |value|). Your ranges tile the "
    "buffer, so look for a rule that depends on more than (padded_numel, world_size, rank).":
        "{n} 个 rank 上的 stage 1（{layout}）用你的 shard_range 训练出的参数与单进程不同：\n"
        "  rank {rank} 上的 {name} 最多差 {err:.3g}（允许：{atol:g} + {rtol:g} x |值|）。你的区间铺满了缓冲区，\n"
        "  所以看看你的规则是否用到了 (padded_numel, world_size, rank) 以外的东西。",
    "{n} ranks: DeepSpeed's flat buffer of {numel:,} elements ({padding} padding, {cut} parameter(s)\n"
    "    cut between ranks, {all_reduces} bucket all-reduces per step) and the paper's {buckets} buckets\n"
    "    ({paper_padding} padding in all, {reduce_scatters} reduce-scatters per step)":
        "{n} 个 rank：DeepSpeed 的扁平缓冲区有 {numel:,} 个元素（补齐 {padding} 个，{cut} 个参数\n"
        "    被切在两个 rank 之间，每步 {all_reduces} 次桶的 all-reduce），论文的做法是 {buckets} 个桶\n"
        "    （共补齐 {paper_padding} 个，每步 {reduce_scatters} 次 reduce-scatter）",
    "for example, a buffer of 12 elements on 3 ranks:": "例如，3 个 rank 上一个 12 个元素的缓冲区：",
    "rank {r} owns {range}": "rank {r} 拥有 {range}",
    "your shard_range tiles every flat buffer in equal pieces, in rank order, and ZeRO stage 1\n"
    "  built on it trains exactly like one process on":
        "你的 shard_range 把每个扁平缓冲区按 rank 顺序切成等长的片段，基于它的 ZeRO stage 1\n"
        "  训练结果与单进程完全一样：",
    # (b) the AdamW step
    "adamw_step raises NotImplementedError: write the part marked 'Exercise' first":
        "adamw_step 抛出了 NotImplementedError：先写标着 'Exercise' 的部分",
    "adamw_step on a random shard of {n} elements, step {step} ({shown})":
        "adamw_step，{n} 个元素的随机分片，第 {step} 步\n  （{shown}）",
    " (your function returned a value: the engine ignores it; update the tensors in place)":
        "\n  （你的函数返回了一个值：引擎会忽略它；要原地更新这些张量）",
    "{where}: exp_avg is off by up to {err:.3g}{note}.\n  hint: {hint}":
        "{where}：\n  exp_avg 最多差 {err:.3g}{note}。\n  提示：{hint}",
    "{where}: exp_avg_sq is off by up to {err:.3g}{note}.\n"
    "  hint: exp_avg_sq <- beta2 * exp_avg_sq + (1 - beta2) * grad^2, in place":
        "{where}：\n  exp_avg_sq 最多差 {err:.3g}{note}。\n"
        "  提示：exp_avg_sq <- beta2 * exp_avg_sq + (1 - beta2) * grad^2，原地更新",
    "{where}: param is off by up to {err:.3g} from torch.optim.AdamW{note}.\n  hint: {hint}":
        "{where}：\n  param 与 torch.optim.AdamW 最多差 {err:.3g}{note}。\n  提示：{hint}",
    "exp_avg <- beta1 * exp_avg + (1 - beta1) * grad, in place (exp_avg.mul_(...).add_(...))":
        "exp_avg <- beta1 * exp_avg + (1 - beta1) * grad，原地更新（exp_avg.mul_(...).add_(...)）",
    "that is coupled weight decay (Adam's L2: grad + weight_decay * param). AdamW decouples it: param <- param * "
    "(1 - lr * weight_decay), and the moments see the plain grad":
        "这是耦合的权重衰减（Adam 的 L2：grad + weight_decay * param）。AdamW 把它解耦：\n"
        "  param <- param * (1 - lr * weight_decay)，两个矩只用原始的 grad",
    "eps is inside the square root: AdamW divides by sqrt(exp_avg_sq / (1 - beta2^step)) + eps, eps added after "
    "the root":
        "eps 放进了平方根里：AdamW 除以 sqrt(exp_avg_sq / (1 - beta2^step)) + eps，\n  eps 在开方之后才加",
    "it matches eps = 1e-8, but this call's eps is {eps:g}: use the eps argument":
        "结果与 eps = 1e-8 一致，但这次调用的 eps 是 {eps:g}：要用参数 eps",
    "param did not change: update it in place (param.mul_, param.addcdiv_, ...), do not rebind it":
        "param 没有变：要原地更新它（param.mul_、param.addcdiv_ 等），不要给变量重新赋值",
    "it matches AdamW without weight decay: first shrink the weights, param <- param * (1 - lr * weight_decay)":
        "结果与不带权重衰减的 AdamW 一致：先把权重缩小，\n  param <- param * (1 - lr * weight_decay)",
    "it matches AdamW without bias correction: divide exp_avg by (1 - beta1^step) and exp_avg_sq by "
    "(1 - beta2^step), as in step 4":
        "结果与不做偏差校正的 AdamW 一致：exp_avg 要除以 (1 - beta1^step)，\n"
        "  exp_avg_sq 要除以 (1 - beta2^step)，就像第 4 步那样",
    "it matches AdamW with step = 1: use the step argument in the bias corrections":
        "结果与 step = 1 的 AdamW 一致：偏差校正里要用参数 step",
    "follow the four lines above in order: decay, the two moments, then param - lr / (1 - beta1^step) * exp_avg / "
    "(sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)":
        "按上面四行的顺序来：衰减、两个矩，然后\n"
        "  param - lr / (1 - beta1^step) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)",
    "stage 1 with your adamw_step on {n} ranks": "在 {n} 个 rank 上用你的 adamw_step 跑 stage 1",
    "stage 1 on {n} ranks with your adamw_step trained to different parameters than one process with torch's "
    "AdamW: on rank {rank}, {name} is off by up to {err:.3g} (allowed: {atol:g} + {rtol:g} x |value|).\n"
    "  hint: the step must use only the tensors it is given, element by element (no norms or means over the "
    "whole tensor: a shard cuts across parameters)":
        "{n} 个 rank 上的 stage 1 用你的 adamw_step 训练出的参数，与单进程用 torch 的 AdamW 不同：\n"
        "  rank {rank} 上的 {name} 最多差 {err:.3g}（允许：{atol:g} + {rtol:g} x |值|）。\n"
        "  提示：这一步只能逐元素地使用传给它的张量（不能对整个张量求范数或均值：\n"
        "  一个分片会横跨多个参数）",
    "{n} ranks (each stepping {mine:,} of {full:,} elements)": "{n} 个 rank（每个只更新 {full:,} 个元素中的 {mine:,} 个）",
    "your adamw_step matches torch.optim.AdamW (two sets of hyperparameters), and ZeRO stage 1\n"
    "  stepping only each rank's shard with it trains exactly like one process on":
        "你的 adamw_step 与 torch.optim.AdamW 一致（两组超参数）；\n"
        "  只用它更新各 rank 自己分片的 ZeRO stage 1，训练结果与单进程完全一样：",
}

# -- exercise 3b: stage 2's buckets -----------------------------------------------------------------
ZH["checks.stage2_buckets"] = {
    "stage {stage}, {n} ranks, {precision}, accumulation {gas}": "stage {stage}，{n} 个 rank，{precision}，梯度累积 {gas}",
    ", communication in {comm}": "，通信用 {comm}",
    "{what}: {error}": "{what} 时：\n  {error}",
    "bucket {bucket} was sent before it was complete: the gradient of {name} arrived after the bucket had gone.\n"
    "  hint: add_grad must return True only when all n_params gradients of the bucket have arrived":
        "桶 {bucket} 还没装满就发出去了：{name} 的梯度在桶发出之后才到。\n"
        "  提示：只有桶里全部 n_params 个梯度都到齐了，add_grad 才能返回 True",
    "after add_grad, bucket[where] does not hold the gradient of {name} (parameter {i} of bucket {bucket}).\n"
    "  hint: add the gradient, flattened, into bucket[where] in place: bucket[where] += grad.reshape(-1)":
        "add_grad 之后，bucket[where] 里不是 {name} 的梯度（桶 {bucket} 的第 {i} 个参数）。\n"
        "  提示：把梯度展平后原地加进 bucket[where]：bucket[where] += grad.reshape(-1)",
    "add_grad said bucket {bucket} was complete after {seen} of its {n} gradients: it would be sent before it was "
    "complete.\n  hint: return True only when all n_params gradients have arrived (len(arrived) == n_params)":
        "桶 {bucket} 的 {n} 个梯度只到了 {seen} 个，add_grad 就说它已装满：它会在装满之前被发出。\n"
        "  提示：只有全部 n_params 个梯度都到齐时才返回 True（len(arrived) == n_params）",
    "reduce_scatter was called twice for bucket {bucket}.\n  hint: one reduce-scatter per bucket":
        "桶 {bucket} 调用了两次 reduce_scatter。\n  提示：每个桶只做一次 reduce-scatter",
    "reduce_scatter got {what}; send the whole bucket ({n} elements), every rank the same size":
        "reduce_scatter 收到的是 {what}；要发送整个桶（{n} 个元素），每个 rank 的大小相同",
    "the bucket was sent as {sent}, but this run communicates in {comm} (training in {dtype}).\n"
    "  hint: convert the bucket to comm_dtype before sending: bucket.to(comm_dtype)":
        "桶以 {sent} 发出，但这次运行用 {comm} 通信（训练用 {dtype}）。\n"
        "  提示：发送前把桶转换成 comm_dtype：bucket.to(comm_dtype)",
    "it was not divided by N (the sum would be N times the average)": "它没有除以 N（求和结果会是平均值的 N 倍）",
    "it was divided by 2, not by the world size N = {n}": "它除以的是 2，而不是总 rank 数 N = {n}",
    "it was scaled by {ratio:.3g}, not by 1/N = 1/{n}": "它乘的是 {ratio:.3g}，而不是 1/N = 1/{n}",
    "bucket {bucket} was sent at {ratio:.3g} x its size: {why}.\n  hint: send bucket / world_size, so the sum over "
    "ranks is the average gradient":
        "桶 {bucket} 发出时是原值的 {ratio:.3g} 倍：{why}。\n"
        "  提示：发送 bucket / world_size，这样各 rank 求和得到的就是平均梯度",
    "reduce_bucket returned without calling reduce_scatter for bucket {bucket}: its gradient never left this "
    "rank.\n  hint: chunks = reduce_scatter(send)":
        "reduce_bucket 没有为桶 {bucket} 调用 reduce_scatter 就返回了：它的梯度从没离开这个 rank。\n"
        "  提示：chunks = reduce_scatter(send)",
    "rank {r}, bucket {bucket}, micro-step {micro}": "rank {r}，桶 {bucket}，第 {micro} 个微步",
    "{where}: grad_shard holds only this micro-step's gradient; the one of the micro-step before is gone.\n"
    "  hint: accumulate across micro-steps: grad_shard += chunks[rank], not grad_shard = ...":
        "{where}：grad_shard 里只有这个微步的梯度，前一个微步的没了。\n"
        "  提示：跨微步累加：grad_shard += chunks[rank]，而不是 grad_shard = ...",
    "{where}: grad_shard got chunks[{k}], a partial sum that belongs to rank {k}.\n  hint: rank r keeps chunks[r], "
    "the only chunk that holds the sum over all ranks":
        "{where}：grad_shard 拿的是 chunks[{k}]，那是属于 rank {k} 的部分和。\n"
        "  提示：rank r 保留 chunks[r]，只有这一块是所有 rank 的总和",
    "{where}: grad_shard did not change.\n  hint: add chunks[rank] into grad_shard in place: "
    "grad_shard += chunks[rank]":
        "{where}：grad_shard 没有变。\n  提示：把 chunks[rank] 原地加进 grad_shard：grad_shard += chunks[rank]",
    "{where}: grad_shard is not (its value before) + chunks[{r}].\n  hint: grad_shard += chunks[rank]":
        "{where}：grad_shard 不等于（它原来的值）+ chunks[{r}]。\n  提示：grad_shard += chunks[rank]",
    "all {n} gradients of bucket {bucket} arrived, but add_grad never returned True: the bucket waited for the "
    "end of backward.\n  hint: return True when len(arrived) == n_params":
        "桶 {bucket} 的 {n} 个梯度都到齐了，但 add_grad 从没返回 True：这个桶一直等到反向结束。\n"
        "  提示：len(arrived) == n_params 时返回 True",
    "the rank's traceback (zerolab.course.checks.full_tracebacks(), then run again) names the line":
        "该 rank 的回溯（运行 zerolab.course.checks.full_tracebacks() 后再运行一次）会指出是哪一行",
    "add_grad or reduce_bucket raised NotImplementedError: write the parts marked 'Exercise' first.":
        "add_grad 或 reduce_bucket 抛出了 NotImplementedError：先写标着 'Exercise' 的部分。",
    "zerolab's own engine": "zerolab 自己的引擎",
    "single-process training": "单进程训练",
    "{what}: trained to different parameters than {against}: on rank {rank}, {name} is off by up to {err:.3g}.\n"
    "  hint: every bucket must go once, as bucket.to(comm_dtype) / world_size, and rank r keeps chunks[r]":
        "{what} 时：\n  训练出的参数与{against}不同：rank {rank} 上的 {name} 最多差 {err:.3g}。\n"
        "  提示：每个桶只发一次，发 bucket.to(comm_dtype) / world_size；rank r 保留 chunks[r]",
    "{what}: {buckets} buckets, {reduce_scatters} reduce-scatters;\n"
    "    equal to zerolab's engine and single-process training":
        "{what}：{buckets} 个桶，{reduce_scatters} 次 reduce-scatter；\n    与 zerolab 的引擎及单进程训练一致",
    "{what}: {buckets} buckets, {reduce_scatters} reduce-scatters;\n    equal to zerolab's engine":
        "{what}：{buckets} 个桶，{reduce_scatters} 次 reduce-scatter；\n    与 zerolab 的引擎一致",
    "your add_grad and reduce_bucket, plugged into zerolab's stages 2 and 3, train like\n"
    "  the engine's own (stage 2 in the paper's pattern: zerolab's ideal_reduce_scatter;\n"
    "  DeepSpeed's stage 2 all-reduces each bucket instead):":
        "你的 add_grad 和 reduce_bucket 接进 zerolab 的 stage 2、3，训练得和引擎自己的一样\n"
        "  （stage 2 用的是论文的做法：zerolab 的 ideal_reduce_scatter；\n"
        "  DeepSpeed 的 stage 2 则是对每个桶做 all-reduce）：",
}

# -- exercise 3c: ZeRO-1 by hand, against DDP -------------------------------------------------------
ZH["checks.zero1"] = {
    # how DDP rounds 1/N (zerolab.course.checks.zero1.ROUNDINGS), the two optimizers (HOW)
    "x 1/N before the sum: DDP's reducer": "求和前 x 1/N：DDP 的 reducer",
    "/ N before the sum: allreduce_hook, DeepSpeed": "求和前 / N：allreduce_hook、DeepSpeed",
    "/ N after the sum": "求和后 / N",
    "SGD, momentum 0.9": "SGD，动量 0.9",
    "AdamW (0.8, 0.95), wd 0.1": "AdamW (0.8, 0.95)，权重衰减 0.1",
    # on a rank
    "{what} raised {name}: {error}": "{what} 抛出了 {name}：{error}",
    "step() (step {k})": "step()（第 {k} 步）",
    # what is wrong
    "N={n}, {how}, after step {k}": "N={n}，{how}，第 {k} 步之后",
    "{where}: every update is {ratio:.3g} times DDP's.\n  hint: ": "{where}：每次更新都是 DDP 的 {ratio:.3g} 倍。\n  提示：",
    "forgot to average: the gradients were summed over the {n} ranks; DDP averages":
        "忘了求平均：梯度在 {n} 个 rank 上求了和；DDP 求的是平均",
    "averaged twice: divide by N once (not before and after the sum)":
        "平均了两次：只除一次 N（不要在求和前后各除一次）",
    "the gradients were divided by {c}, not by N = {n}: use dist.get_world_size()":
        "梯度除以的是 {c}，而不是 N = {n}：用 dist.get_world_size()",
    "the gradient must be the average over the ranks, and lr reach optimizer_cls":
        "梯度必须是各 rank 上的平均值，lr 也要传到 optimizer_cls",
    "{where}: the ranks disagree.\n  Of the {moved:,} elements DDP changed, each rank kept most at their old values "
    "({kept}).\n  hint: forgot to all-gather: each rank updated only its shard; all-gather the shards\n"
    "  (dist.all_gather_single) and copy them into the parameters":
        "{where}：各 rank 的结果不一致。\n  DDP 改动的 {moved:,} 个元素里，每个 rank 都有大部分还是旧值（{kept}）。\n"
        "  提示：忘了 all-gather：每个 rank 只更新了自己的分片；要 all-gather 各分片\n"
        "  （dist.all_gather_single），再拷回参数里",
    "{where}: the ranks end the step with different parameters.\n  hint: every rank must all-gather the same "
    "shards, in rank order, and copy them back":
        "{where}：这一步结束时各 rank 的参数不同。\n  提示：每个 rank 都必须按 rank 顺序 all-gather 同样的分片，再拷回去",
    "{where}: the last {kept} of {psi:,} elements never changed.\n  hint: the uneven shard lost the tail: {psi:,} "
    "does not divide by N = {n}; pad the flat\n  buffer to a multiple of N (DeepSpeed pads) so that the last shard "
    "owns them":
        "{where}：{psi:,} 个元素中最后 {kept} 个从没变过。\n"
        "  提示：不均匀的分片丢了尾巴：{psi:,} 不能被 N = {n} 整除；把扁平缓冲区\n"
        "  补齐到 N 的整数倍（DeepSpeed 就是这样补齐的），让最后一个分片拥有它们",
    "{where}: {kept:,} elements that DDP changed (the first at flat index {first:,})\n  never changed here.\n"
    "  hint: every element must belong to exactly one rank's shard, and be gathered back":
        "{where}：DDP 改动了的 {kept:,} 个元素（第一个在扁平下标 {first:,}）\n  在这里从没变过。\n"
        "  提示：每个元素都必须恰好属于一个 rank 的分片，并且被收集回来",
    "{where}: each shard was stepped with its own rank's gradient.\n  hint: reduce the gradients over the ranks "
    "first (reduce-scatter or all-reduce), then step":
        "{where}：每个分片都是用它自己 rank 的梯度更新的。\n"
        "  提示：先在各 rank 之间归约梯度（reduce-scatter 或 all-reduce），再更新",
    "{where}: step 1 matched DDP bit for bit, step {k} does not.\n  hint: the optimizer's state must carry over "
    "(build self.optimizer once, in __init__, over\n  a shard tensor that stays the same object), and every "
    "keyword argument (momentum,\n  betas, weight_decay) must reach optimizer_cls":
        "{where}：第 1 步与 DDP 逐位相同，第 {k} 步却不同。\n"
        "  提示：优化器状态必须延续下去（在 __init__ 里只建一次 self.optimizer，\n"
        "  建在一个始终是同一对象的分片张量上），而且每个关键字参数（momentum、\n"
        "  betas、weight_decay）都必须传到 optimizer_cls",
    "{where}: the parameters differ from DDP's (largest |difference| {worst:.1e}).\n  hint: is every keyword "
    "argument passed on to optimizer_cls? Are the gradients the\n  average over the ranks, each shard stepped once, "
    "every shard gathered back?":
        "{where}：参数与 DDP 的不同（最大 |差| {worst:.1e}）。\n"
        "  提示：每个关键字参数都传给 optimizer_cls 了吗？梯度是各 rank 上的\n"
        "  平均值吗？每个分片只更新一次、每个分片都收集回来了吗？",
    "N={n}: after zero_grad() {left} parameters still held a gradient.\n  hint: zero_grad() must clear every "
    "parameter's .grad (set it to None), or backward adds the\n  next step's gradients to the old ones":
        "N={n}：zero_grad() 之后还有 {left} 个参数留着梯度。\n"
        "  提示：zero_grad() 必须清掉每个参数的 .grad（设为 None），否则反向传播会把\n"
        "  下一步的梯度加到旧梯度上",
    # how the parameters compare with DDP's
    "bit for bit equal to DDP": "与 DDP 逐位相同",
    "bit for bit ({how})": "逐位相同（{how}）",
    "NOT bit for bit; every |difference| <= {bound}:\n{indent}your sums ran in another order than DDP's "
    "(see the notebook)":
        "并非逐位相同；每个 |差| <= {bound}：\n{indent}你的求和顺序与 DDP 的不同（见 notebook）",
    # the traffic and the memory
    "N={n}: the check counted no collective in step().\n  hint: call torch.distributed's collectives through the "
    "module, dist.<name>(...),\n  so that the check can count them":
        "N={n}：检查在 step() 里没有数到任何集合通信。\n"
        "  提示：通过模块调用 torch.distributed 的集合通信，写成 dist.<name>(...)，\n  检查才能数到它们",
    "N={n}: step() put {wire:,.0f} bytes per rank on the wire ({calls});\n  an all-reduce of the gradients and an "
    "all-gather of the parameters need {need:,.0f}.\n  hint: something is sent twice, or a whole buffer where a "
    "shard would do":
        "N={n}：step() 每个 rank 发出 {wire:,.0f} 字节（{calls}）；\n"
        "  梯度的 all-reduce 加参数的 all-gather 只需要 {need:,.0f}。\n"
        "  提示：有东西发了两次，或者该发一个分片的地方发了整个缓冲区",
    "step() per rank, N={n}: {calls} = {wire:,.0f} bytes on the wire\n    (S = the {s:,}-byte padded buffer: "
    "reduce-scatter + all-gather 2(N-1)/N S = {rs_ag:,.0f};\n    DeepSpeed's default, all-reduce + all-gather, "
    "3(N-1)/N S = {ar_ag:,.0f})":
        "每个 rank 的 step()，N={n}：{calls} = 发出 {wire:,.0f} 字节\n"
        "    （S = 补齐后 {s:,} 字节的缓冲区：reduce-scatter + all-gather 2(N-1)/N S = {rs_ag:,.0f}；\n"
        "    DeepSpeed 的默认做法 all-reduce + all-gather，3(N-1)/N S = {ar_ag:,.0f}）",
    "N={n}: the check found no torch optimizer in your object.\n  hint: keep the optimizer you build with "
    "optimizer_cls as self.optimizer":
        "N={n}：检查在你的对象里找不到 torch 优化器。\n  提示：把用 optimizer_cls 建出的优化器存为 self.optimizer",
    "N={n}: self.optimizer holds no states after {steps} AdamW steps.\n  hint: step the shard with "
    "self.optimizer.step(), not by hand":
        "N={n}：AdamW 更新 {steps} 步之后，self.optimizer 里没有任何状态。\n"
        "  提示：用 self.optimizer.step() 更新分片，不要手写更新",
    "N={n}: the optimizer states weigh {mine:,} bytes on a rank; DDP's {ddp:,}, and a shard's\n  should weigh "
    "about 1/{n} of that ({share:,}).\n  hint: states for all parameters: every rank steps the whole model. Build "
    "self.optimizer\n  over this rank's shard only":
        "N={n}：一个 rank 上的优化器状态有 {mine:,} 字节；DDP 的是 {ddp:,}，\n"
        "  一个分片的应当约为它的 1/{n}（{share:,}）。\n"
        "  提示：存了所有参数的状态：每个 rank 都在更新整个模型。self.optimizer\n  只应建在本 rank 的分片上",
    "the tensor self.optimizer steps": "self.optimizer 更新的张量",
    "the gradient it steps with (.grad)": "它更新时用的梯度（.grad）",
    "N={n}, rank {rank}: {name} has {numel:,} elements, but the memory behind it\n  is {bytes:,} bytes (a shard's "
    "is {share:,}): it is a view of a whole buffer, which it keeps\n  alive on every rank.\n  hint: {hint}":
        "N={n}，rank {rank}：{name}只有 {numel:,} 个元素，背后的内存却有\n"
        "  {bytes:,} 字节（一个分片应为 {share:,}）：它是整个缓冲区的视图（view），\n"
        "  让每个 rank 都留着整个缓冲区。\n"
        "  提示：{hint}",
    ".clone() the slice (DeepSpeed clones its fp32 partition), or make a tensor of its own":
        "对切片调用 .clone()（DeepSpeed 也会复制它的 fp32 分区），或者另建一个独立的张量",
    "give the shard a gradient of its own: reduce-scatter into a shard-sized tensor, or .clone() the slice":
        "给分片一个独立的梯度：reduce-scatter 到一个分片大小的张量里，或者对切片调用 .clone()",
    "N={n}, rank {rank}: the optimizer steps a shard of {numel:,} elements, but its states keep\n  {bytes:,} bytes "
    "alive (DDP's {ddp:,} / {n} = {expect:,}): a state is a view of a whole buffer.\n  hint: let self.optimizer "
    "make its own states for the shard":
        "N={n}，rank {rank}：优化器更新的分片只有 {numel:,} 个元素，它的状态却占着\n"
        "  {bytes:,} 字节（DDP 的 {ddp:,} / {n} = {expect:,}）：某个状态是整个缓冲区的视图（view）。\n"
        "  提示：让 self.optimizer 自己为分片建立状态",
    "the whole model's size": "整个模型的大小",
    "{ratio:.2g} x the whole model's size": "整个模型大小的 {ratio:.2g} 倍",
    "    {path}: {bytes:,} bytes ({size})": "    {path}：{bytes:,} 字节（{size}）",
    "N={n}, rank {rank}: beyond the model's own parameters and gradients, your object keeps\n  {bytes:,} bytes "
    "alive; ZeRO-1 needs about {need:,} (the states, DDP's {ddp:,} / {n},\n  plus a {share:,}-byte shard and its "
    "gradient). The largest it keeps:\n{named}\n  hint: a whole-size tensor kept on every rank (a full copy of the "
    "parameters, a full\n  gradient buffer, full-size moments) is what ZeRO-1 removes: keep only this rank's\n  "
    "shard, and let a whole buffer that step() needs be a local variable":
        "N={n}，rank {rank}：除了模型自己的参数和梯度，你的对象还占着\n"
        "  {bytes:,} 字节；ZeRO-1 只需要约 {need:,}（状态，DDP 的 {ddp:,} / {n}，\n"
        "  加上一个 {share:,} 字节的分片及其梯度）。它占用最多的是：\n{named}\n"
        "  提示：每个 rank 都留着一个整块大小的张量（参数的完整副本、完整的\n"
        "  梯度缓冲区、整块大小的动量），正是 ZeRO-1 要去掉的：只留本 rank 的\n"
        "  分片；step() 需要的整块缓冲区，用局部变量就好",
    "AdamW states per rank, N={n}: {each} bytes; DDP's {ddp:,} / {n} = {share:,}":
        "每个 rank 的 AdamW 状态，N={n}：{each} 字节；DDP 的 {ddp:,} / {n} = {share:,}",
    "N={n}: ranks {ranks} were still waiting after 60 s.\n  hint: every rank must make the same collective calls, "
    "in the same order, with tensors of the same size":
        "N={n}：60 秒后 rank {ranks} 仍在等待。\n  提示：每个 rank 都必须按同样的顺序、用同样大小的张量，做同样的集合通信调用",
    "ShardedOptimizer is not written yet (NotImplementedError): write the parts marked 'Exercise'.":
        "ShardedOptimizer 还没有写（NotImplementedError）：先写标着 'Exercise' 的部分。",
    "the error is your class's; full_tracebacks() shows the line on the rank":
        "错误出在你的类里；full_tracebacks() 会指出它在 rank 上是哪一行",
    "your ShardedOptimizer trains the {psi:,}-parameter MLP as DDP does ({steps} steps each):":
        "你的 ShardedOptimizer 训练这个 {psi:,} 个参数的 MLP，结果与 DDP 相同（每次 {steps} 步）：",
}

# -- exercise 4: the dynamic loss scaler ------------------------------------------------------------
ZH["checks.ch04"] = {
    # the sequences (zerolab.course.checks.ch04.SEQUENCES)
    "DeepSpeed's defaults: 2^16, window 1000, hysteresis 2": "DeepSpeed 的默认值：2^16，窗口 1000，hysteresis 2",
    "the anchor trace: window 2, no hysteresis": "基准轨迹：窗口 2，不用 hysteresis",
    "hysteresis 3, not refilled by a cut": "hysteresis 3，缩小时不补满",
    "consecutive_hysteresis: refilled on every clean step": "consecutive_hysteresis：每个干净步都补满",
    "the floor: min_scale 20 (the cut is clamped to it)": "下限：min_scale 20（缩小时截在下限）",
    "scale_factor 3: cuts divide by 3, growths multiply by 3": "scale_factor 3：缩小时除以 3，增大时乘以 3",
    "at the floor with hysteresis left: tolerated twice, then the run stops":
        "已到下限、但 hysteresis 还没用完：先容忍两次，然后训练停止",
    "at the floor: an overflow that cannot lower the scale stops the run": "在下限：无法再降低缩放值的溢出会让训练停止",
    "sequence '{label}' (flags {flags})": "序列“{label}”（溢出标志 {flags}）",
    # one call of the learner's rule (also on the engine's ranks)
    "update_scale is not written yet (it raised NotImplementedError: {error}). Fill in the cell above, run it, then "
    "this check again.":
        "update_scale 还没有写（它抛出了 NotImplementedError：{error}）。\n"
        "  先把上面的单元格补完并运行，再运行一次这个检查。",
    "update_scale raised {name}: {error}\n  on the call with overflow={overflow} and state {state}\n  hint: only an "
    "overflow at cur_scale == min_scale may raise (LossScaleAtMinimum); call update_scale(new_state(), {overflow}) by "
    "hand to see the line":
        "update_scale 抛出了 {name}：{error}\n  出错的调用：overflow={overflow}，调用前的状态：\n  {state}\n"
        "  提示：只有在 cur_scale == min_scale 时溢出才可以抛出异常（LossScaleAtMinimum）；\n"
        "  手动调用 update_scale(new_state(), {overflow})，就能看到是哪一行",
    " It returned a dict: write into the one you were given instead (state['cur_scale'] = ...).":
        "\n  它返回了一个 dict：应该写进传给你的那个（state['cur_scale'] = ...）。",
    "update_scale returned {type}; it should return None and change `state` in place.{hint}":
        "update_scale 返回了 {type}；它应当返回 None，并原地修改 `state`。{hint}",
    "after update_scale the state has no {missing}; change the values, do not remove keys":
        "update_scale 之后状态里没有 {missing} 了；只改值，不要删键",
    "update_scale changed the setting(s) {changed}; only {changing} change from call to call":
        "update_scale 改了设置 {changed}；\n  每次调用之间只有 {changing} 会变",
    "after update_scale, state[{key}] is {value}; it should be a finite number":
        "update_scale 之后，state[{key}] 是 {value}；它应当是一个有限的数",
    # the first difference, and the part of the rule it points at
    "{where}: the first difference is at iteration {it} (overflow={overflow}).\n  state before: {before}\n"
    "  expected:     {want}\n  yours:        {got}\n  hint: {hint}":
        "{where}：\n  第一处不同在第 {it} 次迭代（overflow={overflow}）。\n  调用前的状态：{before}\n"
        "  期望：        {want}\n  你的：        {got}\n  提示：{hint}",
    "the gradients overflowed and the scale is already min_scale, so it cannot be lowered: DeepSpeed stops the run "
    "here. Raise LossScaleAtMinimum(state['cur_scale'], state['cur_iter']) (only when the hysteresis is used up, i.e. "
    "when the scale would be cut)":
        "梯度溢出了，而缩放值已经是 min_scale，无法再降低：DeepSpeed 在这里停止训练。\n"
        "  抛出 LossScaleAtMinimum(state['cur_scale'], state['cur_iter'])\n"
        "  （只在 hysteresis 已用完、也就是缩放值本该被缩小时）",
    "at min_scale, but cur_hysteresis is still {h}: this overflow is tolerated like any other (cur_hysteresis - 1, "
    "the scale stays); raise only when the hysteresis is used up and the scale would be cut":
        "已在 min_scale，但 cur_hysteresis 还是 {h}：这次溢出和别的溢出一样被容忍\n"
        "  （cur_hysteresis - 1，缩放值不变）；只有 hysteresis 用完、缩放值本该被缩小时才抛出",
    "only raise when an overflow would cut the scale and cur_scale == min_scale already":
        "只有当溢出本该缩小缩放值、而 cur_scale 已经等于 min_scale 时才抛出",
    "cur_iter counts the calls: add 1 at the end of every call, overflow or not":
        "cur_iter 记录调用次数：每次调用结束时加 1，无论是否溢出",
    "hysteresis is used up (delayed_shift = {d}, cur_hysteresis = {h}): when delayed_shift == 1 or cur_hysteresis "
    "== 1, an overflow lowers the scale to max(cur_scale / scale_factor, min_scale)":
        "hysteresis 已用完（delayed_shift = {d}，cur_hysteresis = {h}）：当 delayed_shift == 1 或\n"
        "  cur_hysteresis == 1 时，溢出会把缩放值降到 max(cur_scale / scale_factor, min_scale)",
    "hysteresis: cur_hysteresis is {h}, so this overflow is tolerated: it only lowers cur_hysteresis by one, and the "
    "scale stays":
        "hysteresis：cur_hysteresis 是 {h}，所以这次溢出被容忍：只把 cur_hysteresis 减一，缩放值不变",
    "never below the floor: the new scale is max(cur_scale / scale_factor, min_scale)":
        "永远不低于下限：新的缩放值是 max(cur_scale / scale_factor, min_scale)",
    "you divided by 2, but this scaler's scale_factor is {f:g}: divide by state['scale_factor']":
        "你除以了 2，但这个 scaler 的 scale_factor 是 {f:g}：要除以 state['scale_factor']",
    "a cut divides the scale by scale_factor ({f:g}), once": "缩小就是把缩放值除以 scale_factor（{f:g}），只除一次",
    "a cut leaves cur_hysteresis as it is (DeepSpeed refills it only when the scale grows, or on every clean step "
    "with consecutive_hysteresis); so after the first cut every overflow cuts":
        "缩小时 cur_hysteresis 保持不变（DeepSpeed 只在缩放值增大时补满它，或在开了\n"
        "  consecutive_hysteresis 时每个干净步都补满）；所以第一次缩小之后，每次溢出都缩小",
    "a tolerated overflow lowers cur_hysteresis by exactly one": "被容忍的溢出只把 cur_hysteresis 减一",
    "every overflow, tolerated or not, restarts the count of clean steps: last_overflow_iter = cur_iter (this "
    "call's iteration, before adding 1)":
        "每次溢出，无论是否被容忍，都重新开始数干净步：\n"
        "  last_overflow_iter = cur_iter（本次调用的迭代号，加 1 之前的）",
    "stable = cur_iter - last_overflow_iter - 1 = {it} - ({last}) - 1 = {stable} clean steps came before this one":
        "stable = cur_iter - last_overflow_iter - 1 = {it} - ({last}) - 1 = {stable}：此前连续 {stable} 个干净步",
    "the window: {window}; it is > 0 and a multiple of scale_window = {w}, so the scale doubles now (DeepSpeed "
    "0.19.8 doubles on the (window + 1)-th clean step in a row)":
        "{window}；\n  它 > 0 且是 scale_window = {w} 的倍数，所以缩放值现在就翻倍\n"
        "  （DeepSpeed 0.19.8 在连续第 window + 1 个干净步上翻倍）",
    "the window: {window}; the scale doubles only when that is > 0 and a multiple of scale_window = {w}{extra}":
        "{window}；\n  只有它 > 0 且是 scale_window = {w} 的倍数时，缩放值才翻倍{extra}",
    " (older DeepSpeed used cur_iter - last_overflow_iter without the - 1; 0.19.8 has it)":
        "\n  （更早的 DeepSpeed 用 cur_iter - last_overflow_iter，没有 - 1；0.19.8 有）",
    "you doubled, but this scaler's scale_factor is {f:g}: multiply by state['scale_factor']":
        "你乘了 2，但这个 scaler 的 scale_factor 是 {f:g}：要乘以 state['scale_factor']",
    "a growth multiplies the scale by scale_factor ({f:g}), once": "增大就是把缩放值乘以 scale_factor（{f:g}），只乘一次",
    "with consecutive_hysteresis every clean step refills cur_hysteresis = delayed_shift":
        "开了 consecutive_hysteresis 时，每个干净步都补满：cur_hysteresis = delayed_shift",
    "when the scale grows, the hysteresis is refilled: cur_hysteresis = delayed_shift":
        "缩放值增大时要补满 hysteresis：cur_hysteresis = delayed_shift",
    "without consecutive_hysteresis, a clean step that does not grow the scale leaves cur_hysteresis alone":
        "没开 consecutive_hysteresis 时，没让缩放值增大的干净步不动 cur_hysteresis",
    "a clean step leaves last_overflow_iter alone": "干净步（没有溢出的步）不动 last_overflow_iter",
    "compare your state with the expected one field by field": "把你的状态和期望的状态逐个字段比较",
    # the engine
    "the engine run on {n} ranks (inside your update_scale)": "{n} 个 rank 上的引擎运行（在你的 update_scale 里）",
    "update_scale raised on a rank; the rank's traceback (zerolab.course.checks.full_tracebacks(), then run again) names "
    "the line":
        "update_scale 在某个 rank 上抛出了异常；该 rank 的回溯\n"
        "  （运行 zerolab.course.checks.full_tracebacks() 后再运行一次）会指出是哪一行",
    "the engine (fp16 TinyLM, ZeRO stage 2, {n} ranks; rank {bad}'s loss times inf at steps {steps})":
        "引擎（fp16 TinyLM，ZeRO stage 2，{n} 个 rank；rank {bad} 的 loss 在第 {steps} 步乘以 inf）",
    "{where}: ranks 0 and {r} used different loss scales from step {k} ({a} vs {b}); the rule must depend only on "
    "the state and the overflow flag":
        "{where}：\n  rank 0 和 rank {r} 从第 {k} 步起用的损失缩放值不同（{a} 与 {b}）；\n"
        "  规则只能取决于状态和溢出标志",
    "{where}: at step {step} the engine used loss scale {a} with your rule and {b} with zerolab's":
        "{where}：\n  第 {step} 步，引擎用你的规则时损失缩放值是 {a}，用 zerolab 的是 {b}",
    "{where}: rank {r} skipped steps {mine} with your rule, {ref} with zerolab's":
        "{where}：\n  rank {r} 用你的规则跳过了第 {mine} 步，用 zerolab 的跳过了第 {ref} 步",
    "{where}: rank {r}'s fp32 master weights differ at the end of the run although every loss scale matched":
        "{where}：\n  每个损失缩放值都一致，但运行结束时 rank {r} 的 fp32 主权重不同",
    # what passed
    "sequences: {n} scaler settings, {calls} calls, every state equal to the reference":
        "序列：{n} 组 scaler 设置，{calls} 次调用，每个状态都与参考实现相同",
    "engine: {steps} fp16 steps on {n} ranks; loss scale per step with your rule:":
        "引擎：{n} 个 rank 上 {steps} 个 fp16 步；用你的规则时每一步的损失缩放值：",
    "  skipped steps (every rank): {skipped}": "  跳过的步（每个 rank）：{skipped}",
    "  fp32 master weights after the run: bit-identical to the run with zerolab's scaler on every rank":
        "  运行结束后的 fp32 主权重：每个 rank 上都与用 zerolab 的 scaler 那次运行逐位相同",
    "your update_scale follows DeepSpeed 0.19.8's rule in {calls} sequence calls\n"
    "  and drives the real engine on {n} ranks step for step":
        "你的 update_scale 在 {calls} 次序列调用中都遵循 DeepSpeed 0.19.8 的规则，\n"
        "  并在 {n} 个 rank 上一步不差地驱动了真实的引擎",
}

# -- exercise 5: the host optimizer step over sub-groups ---------------------------------------------
ZH["checks.ch05"] = {
    "{where}: {what}": "{where}：{what}",
    "hint: {hint}": "提示：{hint}",
    "tile {j} (group {i}, elements {a}:{b})": "块 {j}（组 {i}，元素 {a}:{b}）",
    "sub-group {k}, {tile}": "子组 {k}，{tile}",
    "alone, groups of {sizes} elements, sub_group_size {size:,} ({n} sub-groups)":
        "单独检查，各组 {sizes} 个元素，sub_group_size {size:,}（{n} 个子组）",
    "{where}, step {step}": "{where}，第 {step} 步",
    "the engine, {what}": "引擎，{what}",
    "{where}, optimizer step {step}": "{where}，第 {step} 次优化器更新",
    "the engine, {what}, rank {rank}": "引擎，{what}，rank {rank}",
    # optimizer.step(): which tiles hold gradients
    "optimizer.step() called {calls} times; there are {n} sub-groups": "optimizer.step() 调用了 {calls} 次；子组只有 {n} 个",
    "step once per sub-group (for sg in home.sub_groups: ... optimizer.step() ...)":
        "每个子组更新一次（for sg in home.sub_groups: ... optimizer.step() ...）",
    "optimizer.step() number {n} stepped sub-group {other}'s tiles; sub-group {k} was due":
        "第 {n} 次 optimizer.step() 更新的是子组 {other} 的块；该轮到子组 {k} 了",
    "step the sub-groups in order, as home.sub_groups lists them (with NVMe the engine reads them in that order, "
    "the next while this one steps)":
        "按 home.sub_groups 列出的顺序更新各子组（用 NVMe 时引擎就按这个顺序读取，这一组更新时读下一组）",
    "at the step of sub-group {k}, tiles {tiles} of earlier sub-groups held zero gradients":
        "更新子组 {k} 时，前面子组的块 {tiles} 还挂着全零的梯度",
    "zeroing is not dropping: AdamW still moves a tile whose gradient is zero (momentum, weight decay); set "
    "home.tensors[j].grad = None after its step":
        "清零不等于丢弃：梯度为零的块 AdamW 照样会更新（动量、权重衰减）；更新之后设 home.tensors[j].grad = None",
    "at the step of sub-group {k} ({want}), only tiles {live} had a gradient":
        "更新子组 {k}（{want}）时，只有块 {live} 有梯度",
    "one optimizer.step() per sub-group, after ALL its tiles have their gradients (stepping tile by tile calls the "
    "optimizer once per tile)":
        "每个子组一次 optimizer.step()，在它的所有块都拿到梯度之后（逐个块更新会让每个块都调用一次优化器）",
    "at the step of sub-group {k}, all {n} tiles of all {m} sub-groups had a gradient":
        "更新子组 {k} 时，全部 {m} 个子组的 {n} 个块都有梯度",
    "stepping all at once: set the gradients of ONE sub-group, step, clear them, then the next; sub_group_size "
    "bounds the fp32 gradients (and, with NVMe, the states) held at once":
        "一次性全部更新了：只给一个子组设梯度，更新，清掉，再下一个；sub_group_size 限制的是同一时刻持有的 fp32 梯度"
        "（用 NVMe 时还有优化器状态）",
    "at the step of sub-group {k}, tiles {tiles} of earlier sub-groups still had their gradients (the step moves "
    "them again)":
        "更新子组 {k} 时，前面子组的块 {tiles} 还留着梯度（这次更新会再动它们一次）",
    "after optimizer.step(), clear each tile's gradient: home.tensors[j].grad = None":
        "optimizer.step() 之后清掉每个块的梯度：home.tensors[j].grad = None",
    "at the step of sub-group {k}, tiles {tiles} of later sub-groups already had gradients":
        "更新子组 {k} 时，后面子组的块 {tiles} 已经有梯度了",
    "stepping all at once: set only the current sub-group's gradients before each optimizer.step()":
        "一次性全部更新了：每次 optimizer.step() 之前只设当前子组的梯度",
    "at the step of sub-group {k} ({want}), {tile} had no gradient": "更新子组 {k}（{want}）时，{tile} 没有梯度",
    "give every tile of the sub-group its gradient (for j in sg: ...) before stepping":
        "更新之前给子组的每个块都设好梯度（for j in sg: ...）",
    "at the step of sub-group {k}, tiles {live} had gradients; expected {want}":
        "更新子组 {k} 时，有梯度的是块 {live}；应该是 {want}",
    "loop over home.sub_groups in order, each a list of tile numbers": "按顺序遍历 home.sub_groups，每个子组是一串块编号",
    # the gradient a tile holds at the step
    "{where}: the gradient is {dtype}, not float32": "{where}：梯度是 {dtype}，不是 float32",
    "convert the gradient to fp32 (.to(torch.float32)) before unscaling: the masters and the optimizer work in fp32":
        "去缩放（unscale）之前先把梯度转成 fp32（.to(torch.float32)）：主权重和优化器都在 fp32 下工作",
    "{where}: the gradient has shape {shape}, expected {want}": "{where}：梯度的形状是 {shape}，应为 {want}",
    "wrong slice: tile j = (i, a, b) takes grads[i][a:b]": "切片错了：块 j = (i, a, b) 取 grads[i][a:b]",
    "forgot to unscale: multiply by 1 / combined ({c:.6g}: the loss scale times the clipping factor) after "
    "converting to fp32":
        "忘了去缩放：转成 fp32 之后乘以 1 / combined（{c:.6g}：损失缩放值乘以裁剪系数）",
    "divided by combined: multiply by inv = 1.0 / combined instead, as the engine does (the two round differently "
    "in the last bit)":
        "除以了 combined：要像引擎那样乘以 inv = 1.0 / combined（两者在最后一位上的舍入不同）",
    "unscaled in the gradient's 16-bit dtype: convert to fp32 first, then multiply by 1 / combined":
        "在梯度的 16 位 dtype 下做了去缩放：先转成 fp32，再乘以 1 / combined",
    "multiplied by combined: unscaling multiplies by 1 / combined": "乘以了 combined：去缩放是乘以 1 / combined",
    "unscaled twice: multiply by 1 / combined once (combined already holds the clipping)":
        "去缩放了两次：只乘一次 1 / combined（combined 里已经包含了裁剪）",
    "wrong slice: tile j = (i, a, b) takes grads[i][a:b] (group i, from a to b)":
        "切片错了：块 j = (i, a, b) 取 grads[i][a:b]（组 i，从 a 到 b）",
    "the gradient of tile j is grads[i][a:b] converted to fp32, times 1 / combined":
        "块 j 的梯度是 grads[i][a:b] 转成 fp32 后乘以 1 / combined",
    "{where}: the gradient at the step differs from grads[{i}][{a}:{b}] in fp32 x 1/combined (max |difference| "
    "{diff:.3g})":
        "{where}：更新时的梯度与 fp32 的 grads[{i}][{a}:{b}] x 1/combined 不同（最大 |差| {diff:.3g}）",
    # write_params
    "write_params({i}, {start}, ...) starts at no tile of group {i}":
        "write_params({i}, {start}, ...) 的起点不是组 {i} 中任何块的起点",
    "write each tile back from its own start: home.stage.write_params(i, a, t)":
        "每个块从它自己的起点写回：home.stage.write_params(i, a, t)",
    "{tile} was written up before the step of its sub-group {k}": "{tile}在它所在的子组 {k} 更新之前就写回了",
    "write back after optimizer.step(), so that the parameters get the updated values":
        "在 optimizer.step() 之后再写回，参数才能拿到更新后的值",
    "{tile} was written up with {n} values, not {want}": "{tile}写回了 {n} 个值，而不是 {want} 个",
    "wrong slice: write each tile whole, from its own start: home.stage.write_params(i, a, home.tensors[j])":
        "切片错了：每个块要从它自己的起点整块写回：home.stage.write_params(i, a, home.tensors[j])",
    "rounded the master to {name} before writing, and the model is {model}: pass the fp32 master itself; "
    "write_params rounds it once to the model's dtype":
        "写回之前把主权重舍入成了 {name}，而模型是 {model}：直接传 fp32 主权重；write_params 会把它舍入一次，"
        "变成模型的 dtype",
    "wrote the gradient up: the parameters take the updated master, home.tensors[j]":
        "写回的是梯度：参数要的是更新后的主权重 home.tensors[j]",
    "wrote another tile's master: each tile j = (i, a, b) goes up from its own start, "
    "home.stage.write_params(i, a, home.tensors[j])":
        "写回了别的块的主权重：每个块 j = (i, a, b) 从它自己的起点写回，"
        "home.stage.write_params(i, a, home.tensors[j])",
    "write the tile's updated fp32 master up: home.stage.write_params(i, a, home.tensors[j])":
        "写回块更新后的 fp32 主权重：home.stage.write_params(i, a, home.tensors[j])",
    "{tile} was written up with values that are not its updated master": "{tile}写回的值不是它更新后的主权重",
    # when the loop is over
    "optimizer.step() was never called": "从未调用 optimizer.step()",
    "step once per sub-group": "每个子组更新一次",
    "optimizer.step() called {calls} times for {n} sub-groups": "{n} 个子组，optimizer.step() 却调用了 {calls} 次",
    "stepping all at once: step once per sub-group, with only its tiles' gradients set":
        "一次性全部更新了：每个子组更新一次，每次只设它自己块的梯度",
    "step every sub-group (for sg in home.sub_groups)": "每个子组都要更新（for sg in home.sub_groups）",
    "when sub-group {k} stepped, {tile} of an earlier sub-group was not written up yet":
        "子组 {k} 更新时，前面子组的{tile}还没写回",
    "finish each sub-group before the next steps: write its tiles up right after its step (with NVMe its masters "
    "leave host memory when it is done)":
        "下一个子组更新之前先做完这一个：更新之后马上写回它的块（用 NVMe 时，做完的子组的主权重会离开主机内存）",
    "{tile} (and {more} more) never written up": "{tile}（以及另外 {more} 个）从没写回",
    "not writing back: after the step, copy each tile up with home.stage.write_params(i, a, home.tensors[j]); the "
    "parameters keep their old values otherwise":
        "没有写回：更新之后用 home.stage.write_params(i, a, home.tensors[j]) 把每个块写回；否则参数保持旧值",
    "{tile} was written up {n} times": "{tile}写回了 {n} 次",
    "write each tile once, after the step of its sub-group": "每个块只写回一次，在它所在的子组更新之后",
    "after the step, tiles {tiles} still hold their gradients": "更新之后，块 {tiles} 还留着梯度",
    "clear each tile's gradient after stepping (home.tensors[j].grad = None): the host holds them for nothing, and "
    "the next step would move them again":
        "更新之后清掉每个块的梯度（home.tensors[j].grad = None）：主机白白占着它们，下一次更新还会再动它们",
    "your host_step raised": "你的 host_step 抛出了异常",
    "wrong slice: tile j = (i, a, b) takes grads[i][a:b] and home.tensors[j]":
        "切片错了：块 j = (i, a, b) 取 grads[i][a:b] 和 home.tensors[j]",
    "the gradient must be float32, like the master it belongs to": "梯度必须是 float32，和它所属的主权重一样",
    # the results
    "{where}: group {i}'s parameters after 2 steps differ from zerolab's": "{where}：2 步之后组 {i} 的参数与 zerolab 的不同",
    "compare your loop with the steps above: grads down and unscaled, step, grad = None, write up":
        "把你的循环和上面的步骤对照：梯度拿下来并去缩放、更新、grad = None、写回",
    "{where}: tile {j}'s fp32 master after 2 steps differs from zerolab's":
        "{where}：2 步之后块 {j} 的 fp32 主权重与 zerolab 的不同",
    "step each tile exactly once per call, with its own gradient": "每次调用里每个块恰好更新一次，用它自己的梯度",
    "fp32 masters": "fp32 主权重",
    "model parameters": "模型参数",
    "{where}: after {steps} steps the {label} of {name} differ from zerolab's (max |difference| {d:.3g})":
        "{where}：{steps} 步之后 {name} 的{label}与 zerolab 的不同（最大 |差| {d:.3g}）",
    "every step above matched: look at what happens between the steps (write every tile up, clear every gradient)":
        "上面每一步都对：看看两次更新之间发生了什么（每个块都写回、每个梯度都清掉）",
    "{where}: the losses differ from zerolab's: {mine} vs {ref}": "{where}：损失与 zerolab 的不同：你的是 {mine}，zerolab 的是 {ref}",
    "the parameters the forward pass sees come from write_params: write every tile up":
        "前向看到的参数来自 write_params：每个块都要写回",
    "the engine on {n} ranks (with your host_step)": "{n} 个 rank 上的引擎（用你的 host_step）",
    "zerolab.course.checks.full_tracebacks(), then run again, shows the line":
        "运行 zerolab.course.checks.full_tracebacks() 后再运行一次，就能看到是哪一行",
    "alone: 3 fp16 groups ({numel} elements), {n} sub_group_size values, 2 AdamW steps each:":
        "单独检查：3 个 fp16 组（{numel} 个元素），{n} 种 sub_group_size，每种 2 次 AdamW 更新：",
    "  the same bits as zerolab's loop": "  与 zerolab 的循环逐位相同",
    "engine: TinyLM on {n} ranks, offload_optimizer cpu, {steps} steps of 2 micro-batches, clipping 0.05;":
        "引擎：{n} 个 rank 上的 TinyLM，offload_optimizer cpu，{steps} 步、每步 2 个微批次，梯度裁剪 0.05；",
    "  sub-groups per rank at sub_group_size {sizes}:": "  sub_group_size 为 {sizes} 时每个 rank 的子组数：",
    "  {runs} runs ({skipped} steps skipped by the fp16 scaler): masters, parameters and losses":
        "  {runs} 次运行（fp16 的 scaler 跳过了 {skipped} 步）：主权重、参数和损失",
    "  bit-identical to zerolab's": "  都与 zerolab 的逐位相同",
    "your host_step steps {n} sub-group layouts alone as zerolab does,\n"
    "  and is the engine's host optimizer step on {world} ranks (stages 1-3, fp32/fp16/bf16)":
        "你的 host_step 单独检查时在 {n} 种子组划分下都和 zerolab 一样更新，\n"
        "  并在 {world} 个 rank 上充当了引擎的主机端优化器更新（stage 1-3，fp32/fp16/bf16）",
}

# -- exercise 6: the bucket plan -----------------------------------------------------------------------
ZH["checks.ch06"] = {
    "hint: ": "提示：",
    # the cases (zerolab.course.checks.ch06.CASES)
    "small parameters": "小参数",
    "buckets filled exactly to the limit": "正好装到上限的桶",
    "parameters larger than a bucket": "比一个桶还大的参数",
    "everything fits in one bucket": "全部装进一个桶",
    "every parameter larger than a bucket": "每个参数都比一个桶大",
    "an MLP's parameters in gradient order": "按梯度顺序排列的 MLP 参数",
    "{what}: sizes {sizes}, bucket_numel {limit}\n  expected: {want}\n  yours:    {got}\n":
        "{what}：大小 {sizes}，bucket_numel {limit}\n  期望：{want}\n  你的：{got}\n",
    "return a list of buckets, each a list of indices (ints) into named, e.g. [[0, 1], [2]]":
        "返回一个桶的列表，每个桶是 named 中下标（int）的列表，例如 [[0, 1], [2]]",
    "an empty bucket: a parameter larger than a bucket must close the bucket only if it holds something "
    "(if current and size + n > bucket_numel)":
        "出现了空桶：遇到比一个桶还大的参数时，只有当前桶里已经有东西才封桶（if current and size + n > bucket_numel）",
    "parameter(s) {missing} are in no bucket (did the last bucket get appended after the loop?)":
        "参数 {missing} 不在任何桶里（循环结束后，最后一个桶加进去了吗？）",
    "a parameter is in two buckets (or an index out of range): each index exactly once":
        "有参数出现在两个桶里（或下标越界）：每个下标必须恰好出现一次",
    "wrong order: keep the parameters in the order given (the gradient order): do not sort, reverse or regroup them":
        "顺序错了：参数要保持给定的顺序（即梯度顺序），不要排序、反转或重新分组",
    "bucket {bucket} holds {total} elements > bucket_numel {limit}: close the bucket before adding a parameter "
    "that would overflow it; a parameter larger than a bucket goes alone":
        "桶 {bucket} 装了 {total} 个元素 > bucket_numel {limit}：在加入会让它溢出的参数之前先封桶；比一个桶还大的参数单独一桶",
    "off by one at the boundary: bucket {bucket} ({total}) could still take parameter {index} ({size}), filling it "
    "to exactly {limit}; close only when size + n > bucket_numel (not >=)":
        "边界上差了一个：桶 {bucket}（{total}）还能装下参数 {index}（{size}），正好装到 {limit}；只有 size + n > bucket_numel "
        "时才封桶（不是 >=）",
    "bucket {bucket} ({total} elements) was closed although parameter {index} ({size}) still fits: close a bucket "
    "only when the next parameter would overflow it":
        "桶 {bucket}（{total} 个元素）封早了：参数 {index}（{size}）其实还装得下；只有下一个参数会让桶溢出时才封桶",
    "compare your buckets with the expected ones above": "把你的桶和上面期望的桶逐一比较",
    "the engine on {n} ranks (inside your bucket_params)": "{n} 个 rank 上的引擎（出错在你的 bucket_params 里）",
    "bucket_params raised on a rank; zerolab.course.checks.full_tracebacks(), then run again, shows the line":
        "bucket_params 在某个 rank 上抛出了异常；运行 zerolab.course.checks.full_tracebacks() 后再运行一次，就能看到是哪一行",
    "the engine, stage {stage}, reduce_bucket_size {limit}, rank {rank}":
        "引擎，stage {stage}，reduce_bucket_size {limit}，rank {rank}",
    "{where}: the collectives differ from zerolab's\n  expected: {want}\n  yours:    {got}\n"
    "  hint: the engine sends one collective per bucket you return":
        "{where}：集合通信和 zerolab 的不一样\n  期望：{want}\n  你的：{got}\n  提示：你返回的每个桶，引擎都发一次集合通信",
    "{where}: the trained weights differ from zerolab's although the collectives matched":
        "{where}：集合通信一致，但训练出的权重与 zerolab 的不同",
    "alone: {n} parameter lists, every bucket as zerolab cuts it": "单独检查：{n} 组参数，每个桶都和 zerolab 切得一样",
    "engine: MLP{sizes} on {n} ranks, {steps} steps, your buckets inside zerolab":
        "引擎：MLP{sizes}，{n} 个 rank，{steps} 步，zerolab 里用的是你的分桶",
    "  stage {stage}, reduce_bucket_size {limit}: {calls} collectives ({ops}), {bytes:,} bytes;":
        "  stage {stage}，reduce_bucket_size {limit}：{calls} 次集合通信（{ops}），{bytes:,} 字节；",
    "    gradient buckets per step (elements): {sizes}": "    每步的梯度桶（元素数）：{sizes}",
    "  calls, elements, bytes and trained weights: the same as with zerolab's rule":
        "  调用次数、元素数、字节数和训练出的权重：都与按 zerolab 的规则分桶时相同",
    "your bucket_params cuts {n} parameter lists as zerolab does\n"
    "  and packs the real engine's buckets on {world} ranks (stages 1 and 2)":
        "你的 bucket_params 对 {n} 组参数的切法与 zerolab 相同，\n  并在 {world} 个 rank 上为真实引擎装好了桶（stage 1 和 2）",
}

# -- exercise 7: the captain's pick --------------------------------------------------------------------
ZH["checks.ch07"] = {
    "hint: ": "提示：",
    "return a zero_optimization dict like {{'stage': 2}}, not {block}":
        "返回一个 zero_optimization 字典，例如 {{'stage': 2}}，而不是 {block}",
    "offload blocks look like {'device': 'cpu'}": "卸载块的写法是 {'device': 'cpu'}",
    "{config} is not a config DeepSpeed accepts (offload_optimizer needs stage 1+, offload_param stage 3 and "
    "offload_optimizer)":
        "{config} 不是 DeepSpeed 接受的配置（offload_optimizer 需要 stage 1 及以上，offload_param 需要 stage 3 加 offload_optimizer）",
    "the activations (facts.activation_bytes) are on the device at the peak: add them once":
        "峰值时激活值（facts.activation_bytes）在设备上：要把它加上，只加一次",
    "the buffers of stage {stage} (facts.buffer_bytes[{stage}]) come on top of the model states: add them (they "
    "stay with offload)":
        "stage {stage} 的缓冲区（facts.buffer_bytes[{stage}]）要在模型状态之外另加上（开了卸载它们也还在设备上）",
    "Psi against Psi/N in the parameters or gradients: stages 0-1 keep the full gradient and stages 0-2 the full "
    "parameters; stage 2 shards gradients, stage 3 parameters":
        "参数或梯度里 Psi 和 Psi/N 弄混了：stage 0-1 保留完整梯度，stage 0-2 保留完整参数；stage 2 切分梯度，stage 3 切分参数",
    "the optimizer states are sharded (k Psi / N) from stage 1 on, whole at stage 0":
        "优化器状态从 stage 1 起切分（k Psi / N），stage 0 是完整的",
    "a full copy of parameters or gradients (p Psi) too many or too few: with offload_optimizer, stage 1 still "
    "keeps the full gradient on the device, stages 2-3 none":
        "多算或少算了一份完整的参数或梯度（p Psi）：开 offload_optimizer 时，stage 1 仍在设备上保留完整梯度，stage 2-3 不保留",
    "one shard (p Psi / N) too many or too few: with offload_optimizer at stages 2-3 the gradient shard goes to "
    "the host too; offload_param takes stage 3's parameter shard off":
        "多算或少算了一个分片（p Psi / N）：stage 2-3 开 offload_optimizer 时梯度分片也去了主机；offload_param 会把 stage 3 的参数分片从设备上移走",
    "the optimizer shard (k Psi / N): offload_optimizer takes all of it to the host":
        "优化器分片（k Psi / N）：offload_optimizer 把它全部移到主机",
    "the optimizer states (k Psi): offload_optimizer takes them all to the host":
        "优化器状态（k Psi）：offload_optimizer 把它们全部移到主机",
    "fp32 training keeps no separate master copy: its optimizer states are Adam's two moments, 8 bytes per "
    "parameter, not mixed precision's 12 (master + moments); otherwise look for a copy of parameters or "
    "gradients too many or too few":
        "fp32 训练没有单独的主权重：它的优化器状态是 Adam 的两个矩（动量与方差），每个参数 8 字节，而不是混合精度的 12 字节"
        "（主权重 + 两个矩）；否则就检查是不是多算或少算了一份参数或梯度",
    "compare term by term: {precision} keeps {p} bytes per parameter and per gradient and {k} of optimizer state "
    "(facts.param_bytes, facts.optimizer_bytes)":
        "逐项比较：{precision} 下每个参数、每个梯度各占 {p} 字节，每个参数的优化器状态占 {k} 字节"
        "（facts.param_bytes、facts.optimizer_bytes）",
    "device_bytes returned {got}\n  hint: return a number of bytes": "device_bytes 返回了 {got}\n  提示：返回一个字节数",
    "device_bytes, {config}: Psi = {psi:,}, N = {n}, {precision}\n"
    "  expected {want:,.0f} bytes, yours {got:,.0f} (difference {diff:+,.0f})\n":
        "device_bytes，{config}：Psi = {psi:,}，N = {n}，{precision}\n"
        "  期望 {want:,.0f} 字节，你的是 {got:,.0f}（差 {diff:+,.0f}）\n",
    "Psi = {psi:,}, N = {n}, {precision}, budget {budget:,} bytes\n  expected: {want}\n  yours:    ":
        "Psi = {psi:,}，N = {n}，{precision}，预算 {budget:,} 字节\n  期望：{want}\n  你的：",
    "hint: {config} needs {need:,.0f} bytes <= the budget: return the first config that fits, None only when "
    "none does":
        "提示：{config} 需要 {need:,.0f} 字节 <= 预算：返回第一个装得下的配置，只有都装不下时才返回 None",
    "hint: yours needs {need:,.0f} bytes > the budget: choose only a config whose device_bytes(...) <= budget":
        "提示：你选的配置需要 {need:,.0f} 字节 > 预算：只能选 device_bytes(...) <= budget 的配置",
    "hint: nothing fits; return None": "提示：没有配置装得下；返回 None",
    "raise the stage before offloading: offload_optimizer comes only when no stage 0-3 fits":
        "先升 stage 再卸载：只有 stage 0-3 都装不下时才轮到 offload_optimizer",
    "the lowest stage that fits comes first": "装得下的最低 stage 排在最前",
    "offload the optimizer before the parameters": "先卸载优化器，再卸载参数",
    "hint: {config} also fits ({need:,.0f} bytes) and comes first in the captain's rule: {why}":
        "提示：{config} 也装得下（{need:,.0f} 字节），而且在队长的规则里排在前面：{why}",
    "hint: the rule: stages 0, 1, 2, 3 without offload, then offload_optimizer at stages 1, 2, 3, then stage 3 "
    "with both offloads; the first that fits":
        "提示：规则是：不卸载的 stage 0、1、2、3，然后 stage 1、2、3 加 offload_optimizer，最后 stage 3 加两种卸载；选第一个装得下的",
    "measuring the facts on {n} ranks": "在 {n} 个 rank 上实测 facts",
    "run the check again": "再运行一次检查",
    "the engine, TinyLM on {n} ranks, {precision}, device_budget {budget:,} bytes":
        "引擎，{n} 个 rank 上的 TinyLM，{precision}，device_budget {budget:,} 字节",
    "{where}: you returned {got}": "{where}：你返回了 {got}",
    "{where}:\n  your {config} ran out of memory:\n  {message}\n": "{where}：\n  你选的 {config} 显存不足：\n  {message}\n",
    "hint: it needs {peak:,} bytes at its peak; device_bytes(...) said {need:,.0f}: is every term there?":
        "提示：它的峰值需要 {peak:,} 字节；device_bytes(...) 算出的是 {need:,.0f}：每一项都算上了吗？",
    "{config} trains under this budget (peak {peak:,} bytes): return it":
        "{config} 能在这个预算下训练（峰值 {peak:,} 字节）：返回它",
    "{config} also fits (peak {peak:,} bytes) and comes first in the captain's rule: it moves less per step":
        "{config} 也装得下（峰值 {peak:,} 字节），而且在队长的规则里排在前面：它每步搬运的数据更少",
    "{where}:\n  expected: {want}\n  yours:    {got}\n": "{where}：\n  期望：{want}\n  你的：{got}\n",
    "device_bytes: {n} configs at {settings} settings (Psi up to 7e9, N = 2, 3, 4, 8,\n  fp16, bf16, fp32), as the "
    "formula":
        "device_bytes：{settings} 组设置下的 {n} 个配置（Psi 最大到 7e9，N = 2、3、4、8，\n  fp16、bf16、fp32），与公式一致",
    "choose_config: {n} budgets, each config's need exactly (it fits: at most the budget),\n  just under another, "
    "and one below all: the rule's pick":
        "choose_config：{n} 个预算（恰好等于每个配置的需求：相等就算装得下；略低于另一个配置的需求；\n"
        "  以及一个低于所有需求的），选出的都与规则一致",
    "engine: TinyLM, {steps} steps per run, facts measured on the ranks": "引擎：TinyLM，每次运行 {steps} 步，facts 在各 rank 上实测",
    "; {n} earlier config(s) over the budget": "；前面 {n} 个配置超出预算",
    "  N = {n}, {precision}, budget {budget:>9,}: None: every config over it":
        "  N = {n}，{precision}，预算 {budget:>9,}：None：所有配置都超出预算",
    "your device_bytes and choose_config pick, for every budget, the config that trains\n"
    "  under it in the real engine and no config earlier in the captain's rule fits":
        "对每个预算，你的 device_bytes 和 choose_config 选出的配置都能在真实引擎里、在该预算下训练，\n"
        "  而队长规则中排在它前面的配置都装不下",
}

# -- exercise 8: stage-3 knobs for a goal --------------------------------------------------------------
ZH["checks.ch08"] = {
    # the goals (zerolab.course.checks.ch08.GOALS)
    "biases whole, weights sharded: all 8 biases (64 elements) persistent, no weight (4,096)":
        "偏置完整、权重分片：8 个偏置（各 64 个元素）全部常驻，权重（4,096）一个也不常驻",
    "biases persistent; at most {calls} parameter all-gather calls per step and at most {peak:,} elements gathered "
    "or in flight at once":
        "偏置常驻；每步参数的 all-gather 调用不超过 {calls} 次，同一时刻已收集或在途的元素不超过 {peak:,} 个",
    "weights sharded, stage3_prefetch_bucket_size left at DeepSpeed's default (5e7), and no group gathered ahead "
    "of use (0 prefetched)":
        "权重分片，stage3_prefetch_bucket_size 保持 DeepSpeed 的默认值（5e7），并且没有任何组在用到之前"
        "就收集（预取 0 个）",
    "hint: {hint}": "提示：{hint}",
    # malformed answers
    "goal {goal}: knobs({name}) returned {type}": "目标 {goal}：knobs({name}) 返回了 {type}",
    "return a dict of stage-3 keys, e.g. {example}": "返回一个由 stage 3 的键组成的 dict，例如 {example}",
    "goal {goal}: key(s) {bad} are not among the knobs of this exercise": "目标 {goal}：键 {bad} 不在本练习的旋钮之列",
    "use only {keys} (the stage stays 3, the model the same)": "只能用 {keys}（stage 保持 3，模型不变）",
    "goal {goal}: {key} = {value}": "目标 {goal}：{key} = {value}",
    "a whole number of elements, 0 or more (1e5 is fine)": "元素个数要是整数，0 或更大（写 1e5 也可以）",
    "the engine with your knobs": "用你的旋钮运行的引擎",
    "see the rank's error above": "见上面该 rank 的错误",
    # a goal missed
    "goal {goal}: {what}": "目标 {goal}：{what}",
    "the goal: {goal}": "目标：{goal}",
    "your knobs: {zero}": "你的旋钮：{zero}",
    "  measured (last step, rank 0): calls {calls:,}, prefetches {prefetches:,}, peak {peak:,}\n"
    "    and {n} persistent parameters ({numel:,} elements)":
        "  实测（最后一步，rank 0）：all-gather 调用 {calls:,} 次，预取 {prefetches:,} 个组，峰值 {peak:,}\n"
        "    以及 {n} 个常驻参数（共 {numel:,} 个元素）",
    "{n} weight(s) ({numel:,} elements) persistent": "有 {n} 个权重（各 {numel:,} 个元素）常驻了",
    "a parameter is persistent when its numel <= stage3_param_persistence_threshold (DeepSpeed's default 1e5 keeps "
    "every parameter of this small model whole); choose a threshold that a weight ({numel:,}) does not meet":
        "参数的 numel <= stage3_param_persistence_threshold 时就会常驻（DeepSpeed 默认的 1e5 会让这个小模型的"
        "每个参数都保持完整）；选一个权重（{numel:,}）达不到的阈值",
    "stage3_model_persistence_threshold = {cap:,} caps the total persistent elements: the 8 biases need {need}":
        "stage3_model_persistence_threshold = {cap:,} 限制了常驻元素的总数：8 个偏置需要 {need}",
    "off by one: the rule is numel <= threshold, so a {n}-element bias needs {n} or more":
        "差了一个：规则是 numel <= 阈值，所以 {n} 个元素的偏置需要阈值 {n} 或更大",
    "only {biases} of the {layers} biases are persistent: the threshold must be at least {n} (numel <= threshold)":
        "{layers} 个偏置中只有 {biases} 个常驻：阈值至少要是 {n}（numel <= 阈值）",
    "{biases} of {layers} biases persistent": "{layers} 个偏置中有 {biases} 个常驻",
    "peak {peak:,} elements > {limit:,}": "峰值 {peak:,} 个元素 > {limit:,}",
    "stage3_max_reuse_distance = {reuse:,} keeps a weight gathered after its forward when it is used again within "
    "that many elements (the last layers of forward are the first of backward; DeepSpeed's 1e9 keeps the whole "
    "model gathered across the turn), and stage3_max_live_parameters does not bound what reuse keeps: lower the "
    "reuse distance":
        "stage3_max_reuse_distance = {reuse:,} 会让权重在前向之后继续保持收集状态，只要它在这么多元素之内"
        "还会再用到（前向的最后几层正是反向的头几层；DeepSpeed 的 1e9 让整个模型在前向转反向的拐点处都保持"
        "收集），而 stage3_max_live_parameters 管不到复用所保留的部分：调低复用距离",
    "stage3_max_live_parameters = {live:,} is a budget, not a cap: a top-up takes groups while fewer than max_live - "
    "available elements are taken, and the group that crosses the budget is taken too, so the peak can pass "
    "max_live by up to one weight ({weight:,}): leave room for it (max_live + one weight within {limit:,}, or a "
    "whole number of weights)":
        "stage3_max_live_parameters = {live:,} 是预算，不是上限：一批预取在已取元素少于 max_live - available "
        "时继续取组，越过预算的那个组也会被取，所以峰值最多可以超出 max_live 一个权重（{weight:,}）：给它留出"
        "余地（max_live 加一个权重不超过 {limit:,}，或者取整数个权重）",
    "stage3_max_live_parameters bounds what is gathered plus in flight when prefetch tops up; "
    "stage3_prefetch_bucket_size bounds only one top-up, and top-ups repeat at every module's fetch: set the budget":
        "stage3_max_live_parameters 限制的是每批预取时已收集加在途的量；stage3_prefetch_bucket_size 只限制一次"
        "预取一批，而每个模块取参数时都会预取一批：要设的是预算",
    "stage3_prefetch_bucket_size = {bucket:,} caps what one top-up (one all-gather call) may take: a larger prefetch "
    "bucket lets one call carry more weights, while stage3_max_live_parameters keeps the peak":
        "stage3_prefetch_bucket_size = {bucket:,} 限制了一批预取（一次 all-gather 调用）能取多少：预取桶大一些，"
        "一次调用就能带上更多权重，而峰值由 stage3_max_live_parameters 把控",
    "each top-up is one all-gather call of the groups it takes, at most max_live - available elements (the crossing "
    "group included): a larger stage3_max_live_parameters lets a call carry more weights; raise it as far as the "
    "peak allows, and measure with zerolab.course.checks.ch08.measure":
        "每批预取是对它取到的组做一次 all-gather 调用，最多 max_live - available 个元素（包括越过的那个组）："
        "stage3_max_live_parameters 越大，一次调用能带的权重越多；在峰值允许的范围内尽量调大，"
        "并用 zerolab.course.checks.ch08.measure 测一测",
    "{calls} all-gather calls per step > {limit}": "每步 {calls} 次 all-gather 调用 > {limit}",
    "stage3_prefetch_bucket_size was changed": "你改了 stage3_prefetch_bucket_size",
    "leave the prefetch bucket at DeepSpeed's default (drop the key or set 5e7): another knob can stop prefetching":
        "预取桶保持 DeepSpeed 的默认值（去掉这个键或设为 5e7）：要停掉预取，得靠另一个旋钮",
    "{n} group(s) gathered ahead of use": "有 {n} 个组在用到之前就收集了",
    "stage3_max_live_parameters = {live:,} still leaves room: a top-up runs at every module's fetch, the root's "
    "included, where nothing is gathered yet (available 0), and it keeps taking groups while it has taken fewer "
    "than max_live - available elements, the group that crosses that included; prefetch stops only where max_live "
    "- available <= 0 at every fetch (a module's own gather is never blocked, only prefetch)":
        "stage3_max_live_parameters = {live:,} 仍然留有余地：每个模块取参数时都会预取一批，根模块也不例外，"
        "而那时还什么都没收集（available 为 0）；每批预取在已取元素少于 max_live - available 时一直取组，"
        "越过它的那个组也算在内；只有每次取参数时都有 max_live - available <= 0，预取才会停止"
        "（模块自己的收集从不被拦，被拦的只是预取）",
    "goal {goal}: the trained parameters differ from the run with DeepSpeed's defaults (this should never happen: "
    "report it)":
        "目标 {goal}：训练出的参数与用 DeepSpeed 默认值的那次运行不同（这不应该发生：请报告这个问题）",
    # what passed
    "MLP{sizes}x{layers} at stage 3 on {n} ranks, last of {steps} steps, rank 0:":
        "MLP{sizes}x{layers}，stage 3，{n} 个 rank，{steps} 步中的最后一步，rank 0：",
    "run": "运行",
    "all-gather calls": "all-gather 调用",
    "prefetched": "预取",
    "peak": "峰值",
    "persistent": "常驻",
    "param bytes": "参数字节",
    "defaults": "默认值",
    "  trained parameters: bit-identical in all four runs": "  训练出的参数：四次运行逐位相同",
    "your knobs meet goals A, B and C in the real engine on 2 ranks": "你的旋钮在 2 个 rank 上的真实引擎里达成了目标 A、B 和 C",
    # a miss's first line: the mistake and its fix, on their own
    "goal {goal}: {what}; fix: {fix}": "目标 {goal}：{what}；改法：{fix}",
    "stage3_model_persistence_threshold >= {need}, or drop it": "stage3_model_persistence_threshold >= {need}，或者去掉它",
    "set stage3_max_live_parameters, the budget": "设置预算 stage3_max_live_parameters",
    "raise stage3_max_live_parameters within the peak": "在峰值允许的范围内调大 stage3_max_live_parameters",
    "raise stage3_prefetch_bucket_size": "调大 stage3_prefetch_bucket_size",
    "leave it at 5e7 (drop the key)": "保持 5e7（去掉这个键）",
    "lower stage3_max_live_parameters": "调小 stage3_max_live_parameters",
}

# -- exercise 8c: stage 3's gather and release as module hooks ---------------------------------------
ZH["checks.hooks3"] = {
    # phases and events (zerolab.course.checks.hooks3.run_rank)
    "forward": "前向",
    "backward": "反向",
    "step": "优化器更新",
    "gather": "收集",
    "release": "释放",
    " and ": " 和 ",
    ", ": "、",
    "hint: {hint}": "提示：{hint}",
    "(nothing: the run ended)": "什么也没做（运行已结束）",
    "optimizer step": "到了优化器更新",
    "{what} {label} in {phase}": "在{phase}中{what} {label}",
    "the {phase} raised on rank 0: {error}\n  hint: the check (below) names the likely mistake":
        "rank 0 上的{phase}抛出了异常：{error}\n  提示：下面的检查会指出可能的错误",
    "stage 3 on {n} ranks, rank 0, your hooks in the engine": "{n} 个 rank 上的 stage 3，rank 0，引擎里用的是你的钩子",
    "  event {k}: zerolab's hooks {want}; yours {got}": "  第 {k} 个事件：zerolab 的钩子{want}；你的{got}",
    "{where}: the {phase} raised: {error}": "{where}：\n  {phase}抛出了异常：{error}",
    "never released": "从不释放",
    "gathered too much at once": "同一时刻收集得太多",
    "{where}: {what}: peak {mine:,} vs {ref:,} gathered elements at once (zerolab's hooks)":
        "{where}：\n  {what}：同一时刻收集的元素峰值 {mine:,}，zerolab 的钩子是 {ref:,}",
    "{where}: your gathers and releases differ from zerolab's hooks'\n  parameter all-gathers: yours {n_m} calls, "
    "{b_m:,} bytes; zerolab's {n_r} calls, {b_r:,} bytes":
        "{where}：\n  你的收集与释放和 zerolab 的钩子不同\n"
        "  参数的 all-gather：你的 {n_m} 次调用、{b_m:,} 字节；zerolab 的 {n_r} 次调用、{b_r:,} 字节",
    "{where}: the same gathers as zerolab's hooks, but the losses or parameters differ":
        "{where}：\n  收集和 zerolab 的钩子一样，但损失或参数不同",
    "a module ran with a stale or wrong copy of a parameter; release with params.reshard or after_forward only, "
    "never by hand":
        "某个模块运行时用的是参数过时或错误的副本；只能用 params.reshard 或 after_forward 释放，不要手动释放",
    # the likely mistake
    "you release a module's groups after its forward and never gather them again before its backward: in "
    "post_forward, on_first_output_grad(output, fn) with fn unsharding them":
        "你在模块前向之后释放了它的组，却在它反向之前再也没有收集回来：在 post_forward 里调用 "
        "on_first_output_grad(output, fn)，让 fn 把它们 unshard",
    "you forget the external weight: {name} is read by attribute outside its own module's forward; gather it in "
    "on_param_read and tie it to the module running (self.frames[-1] now, self.registered for the next steps), so "
    "that it is released after that forward and gathered before its backward":
        "你漏了外部权重：{name} 是在它自己模块的前向之外通过属性读取的；在 on_param_read 里收集它，"
        "并把它挂到正在运行的模块上（这一次挂到 self.frames[-1]，以后各步靠 self.registered），"
        "这样它会在那次前向之后释放、在其反向之前重新收集",
    "you gather {name} where it is read but do not tie it to that module for good: in on_param_read add it to "
    "self.registered[module] too, so that from the next forward on, pre_forward gathers it with the module's own "
    "groups in one all-gather (DeepSpeed's register_external_parameter)":
        "你在读取 {name} 的地方收集了它，却没有把它长期挂到那个模块上：在 on_param_read 里也把它加进 "
        "self.registered[module]，这样从下一次前向起，pre_forward 会在同一次 all-gather 里把它和模块自己的组"
        "一起收集（DeepSpeed 的 register_external_parameter）",
    "you release {name} when its forward ends, where zerolab's hooks keep it for backward: "
    "stage3_max_reuse_distance says it is used again soon. Release through params.after_forward(group), which "
    "keeps what the reuse distance keeps (DeepSpeed's __params_to_release), never params.reshard":
        "你在前向结束时释放了 {name}，而 zerolab 的钩子会把它留到反向：stage3_max_reuse_distance 表明它很快"
        "还要用。通过 params.after_forward(group) 释放（复用距离要留的，它会留下；即 DeepSpeed 的 "
        "__params_to_release），不要用 params.reshard",
    "you release {name} in backward before its module's backward has run: a forward that runs inside backward "
    "(torch.utils.checkpoint recomputing a block) must not release in post_forward, the backward that follows uses "
    "what it gathered (skip the release while params.in_backward)":
        "你在反向中、{name} 所属模块的反向还没运行时就释放了它：在反向里运行的前向（torch.utils.checkpoint "
        "重算一个块）不能在 post_forward 里释放，紧接着的反向要用它收集来的参数（params.in_backward 为真时"
        "跳过释放）",
    "you do not release after a module's backward: in pre_forward, on_inputs_grad(inputs, fn) with fn calling "
    "params.after_backward(ids) for the module's groups and those tied to it (a tied weight goes after each "
    "module's backward and is gathered again for the other's)":
        "你在模块反向之后没有释放：在 pre_forward 里调用 on_inputs_grad(inputs, fn)，让 fn 对模块自己的组和"
        "挂到它上面的组调用 params.after_backward(ids)（共享权重在每个模块反向之后释放，另一个模块反向时再收集）",
    "  every gather and release as zerolab's hooks, in the same order": "  每次收集与释放都和 zerolab 的钩子一样，顺序也一样",
    "the same groups, in more calls: you gather a module's groups one by one. Gather its unit (its own groups and "
    "those tied to it) in one all-gather, params.unshard_unit(ids), as DeepSpeed's fetch_sub_module does":
        "收集的组相同，调用次数却更多：你把一个模块的组逐个收集了。用 params.unshard_unit(ids) 在一次 "
        "all-gather 里收集它的整个单元（它自己的组和挂到它上面的组），DeepSpeed 的 fetch_sub_module 也是这样做的",
    "{name} (read outside its own module) is not released when the forward that read it ends: in on_param_read "
    "add it to the frame of the module running now (self.frames[-1]), whose post_forward releases it and whose "
    "backward gathers it again":
        "{name}（在它自己的模块之外读取）在读取它的那次前向结束时没有释放：在 on_param_read 里把它加进"
        "当前正在运行的模块的帧（self.frames[-1]），由那个模块的 post_forward 释放它、反向时再收集回来",
    "you never release: after a module's forward call params.after_forward(group) for each of its groups (it "
    "releases unless the reuse distance keeps the group)":
        "你从不释放：模块前向之后，对它的每个组调用 params.after_forward(group)（除非复用距离留住这个组，"
        "否则它就会释放）",
    "you gather {name} before its module's forward runs: gather only the groups of the module about to run "
    "(params.module_groups[module]; module.parameters() recurses into every child)":
        "你在 {name} 所属模块的前向运行之前就收集了它：只收集即将运行的模块的组"
        "（params.module_groups[module]；module.parameters() 会递归进每个子模块）",
    "a double gather: you gather {name} again in {phase} right after releasing it, where zerolab's hooks keep it. "
    "Release only through params.after_forward and params.after_backward (they keep what the reuse distance says) "
    "and gather through params.unshard_unit (it gathers nothing that is gathered)":
        "重复收集：你在{phase}中刚释放 {name} 就又收集了一次，而 zerolab 的钩子会留着它。只通过 "
        "params.after_forward 和 params.after_backward 释放（复用距离要留的它们会留），通过 params.unshard_unit "
        "收集（已收集的组它不会再收集）",
    "before a module's backward you gather its own groups but not {name}, read in its forward from outside: "
    "re-gather the frame's groups too":
        "模块反向之前你收集了它自己的组，却没有收集 {name}（它在前向中从外部读取）：把帧里的组也重新收集",
    "you re-gather the wrong module before backward: the function given to on_first_output_grad must unshard the "
    "groups of the module whose forward produced that output (captured when post_forward runs), not another's":
        "反向之前你重新收集错了模块：传给 on_first_output_grad 的函数必须 unshard 产生该输出的那个模块的组"
        "（在 post_forward 运行时记下），而不是别的模块的",
    "you gather a group zerolab does not gather here: a group gathered twice (a shared weight released and "
    "gathered again by each module that uses it?) or one the module does not use (parameters(recurse=True) "
    "gathers every child's too: use params.module_groups[module])":
        "你收集了一个 zerolab 在这里不收集的组：要么是收集了两次的组（用到共享权重的每个模块都把它释放、"
        "又收集了一次？），要么是模块用不到的组（parameters(recurse=True) 会把每个子模块的也收集进来："
        "用 params.module_groups[module]）",
    "you release a group that is still in use (after a child's forward, a group of the parent; or a shared weight "
    "released by one of the two modules while the other needs it)":
        "你释放了一个还在用的组（在子模块前向之后释放了父模块的组；或者两个模块共享的权重，一个模块把它释放了，"
        "另一个却还需要它）",
    "compare your hooks' gathers and releases with zerolab.zero.stage3.hooks.ModuleHooks's":
        "把你的钩子的收集与释放和 zerolab.zero.stage3.hooks.ModuleHooks 的逐个对照",
    "your hooks on {n} ranks": "{n} 个 rank 上你的钩子",
    "your __init__ or a hook raised while the engine started; zerolab.course.checks.full_tracebacks(), then run again, "
    "shows the line":
        "引擎启动时你的 __init__ 或某个钩子抛出了异常；运行 zerolab.course.checks.full_tracebacks() 后再运行一次，"
        "就能看到是哪一行",
    # what passed
    "{world} ranks, {steps} steps: {n} all-gathers, {bytes:,} bytes on rank 0, peak {peak:,} elements: as "
    "zerolab's hooks":
        "{world} 个 rank，{steps} 步，rank 0：{n} 次 all-gather，{bytes:,} 字节，峰值 {peak:,} 个元素；"
        "同 zerolab 的钩子",
    "losses and parameters bit for bit those of zerolab's hooks (tied head, two external weights, "
    "a checkpointed block)":
        "损失和参数与 zerolab 的钩子逐位相同（head 为共享权重，两个外部权重，一个做了激活检查点的块）",
    # the runs (zerolab.course.checks.hooks3.SCENARIOS)
    "reuse distance 0": "复用距离 0",
    "reuse distance 1,200, MLP checkpointed": "复用距离 1,200，MLP 做了激活检查点",
    "your hooks gather, release and gather again as zerolab's on {worlds} ranks":
        "你的钩子在 {worlds} 个 rank 上收集、释放、再收集，都与 zerolab 的一样",
}

# -- exercise 9: the capstone's DeepSpeed config ------------------------------------------------------
ZH["checks.ch09"] = {
    "hint: {hint}": "提示：{hint}",
    "{where}\n  expected: {expected}\n  yours:    {got}": "{where}\n  期望：{expected}\n  你的：{got}",
    "{where} returned {type}, not a dict\n  hint: return the DeepSpeed config as a Python dict":
        "{where} 返回的是 {type}，不是 dict\n  提示：把 DeepSpeed 配置作为 Python dict 返回",
    "{where}: the config does not load on {n} rank(s):": "{where}：这个配置在 {n} 个 rank 上加载不了：",
    "the three batch keys must agree on every number of ranks: train_batch_size = train_micro_batch_size_per_gpu x "
    "gradient_accumulation_steps x world_size; compute the micro-batch from world_size":
        "三个 batch 键在任何 rank 数下都必须一致：train_batch_size = train_micro_batch_size_per_gpu x "
        "gradient_accumulation_steps x world_size；微批次要根据 world_size 算出来",
    "DeepSpeed (and zerolab) refuse this config; the lines above say which key":
        "DeepSpeed（以及 zerolab）拒绝这个配置；上面几行说明了是哪个键",
    "{where}: the batch keys": "{where}：batch 的几个键",
    "all three keys of the batch triple": "batch 三元组的全部三个键",
    "missing {keys}": "缺少 {keys}",
    "give train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps, so that a reader (and "
    "DeepSpeed) can check they agree":
        "写出 train_batch_size、train_micro_batch_size_per_gpu 和 gradient_accumulation_steps，"
        "让读配置的人（以及 DeepSpeed）能核对它们是否一致",
    "{n} sequences per step on any number of ranks": "无论多少个 rank，每步都是 {n} 条序列",
    "the global batch must not change with the number of ranks, or a run resumed on another number of ranks trains "
    "on another problem: divide it, do not multiply it":
        "全局 batch 不能随 rank 数变化，否则换一个 rank 数恢复训练，训练的就是另一个问题了：用全局 batch 除出微批次，"
        "而不是用微批次乘出全局 batch",
    "the brief accumulates 2 micro-batches per step": "任务要求每步累积 2 个微批次",
    "stages 1 and 2 leave every rank a whole copy of the parameters (the furniture); only stage 3 shards them, and "
    "offload_param needs stage 3":
        "stage 1 和 2 下每个 rank 都留着一整份参数（家具）；只有 stage 3 才把参数分片，而且 offload_param 需要 stage 3",
    "the heavy notebook (fp32 masters and Adam moments) goes to the warehouse: "
    "\"offload_optimizer\": {\"device\": \"cpu\"}":
        "小本子（fp32 主权重和 Adam 的两个矩）要放进仓库：\"offload_optimizer\": {\"device\": \"cpu\"}",
    "the parameter shards go to the warehouse too: \"offload_param\": {\"device\": \"cpu\"} (a separate block from "
    "offload_optimizer)":
        "参数分片也要放进仓库：\"offload_param\": {\"device\": \"cpu\"}（和 offload_optimizer 是两个独立的块）",
    "DeepSpeed's default (1e5 elements) keeps every tensor smaller than that whole on every rank; every tensor of "
    "this small GPT is smaller, so nothing would be sharded":
        "DeepSpeed 的默认值（1e5 个元素）让比它小的张量在每个 rank 上都保持完整；这个小 GPT 的每个张量都更小，"
        "所以什么都不会分片",
    "{where}: precision": "{where}：精度",
    "{where}: {key}": "{where}：{key}",
    " and ": " 和 ",
    ", ": "、",
    "bf16 enabled (\"bf16\": {\"enabled\": true}), fp16 off": "启用 bf16（\"bf16\": {\"enabled\": true}），关闭 fp16",
    "fp32 (no bf16 block, or enabled false)": "fp32（没有 bf16 块，或 enabled 为 false）",
    "bf16 has fp32's range, so it needs no loss scaler; fp16 would scale the loss":
        "bf16 的数值范围和 fp32 一样，不需要损失缩放；fp16 才要缩放损失",
    "decoupled weight decay: AdamW (Adam with weight_decay would add it to the gradient)":
        "解耦的权重衰减：AdamW（带 weight_decay 的 Adam 会把它加到梯度上）",
    "lr 6e-3, betas [0.9, 0.95], weight_decay 0.01, as in the brief": "按任务要求：lr 6e-3，betas [0.9, 0.95]，weight_decay 0.01",
    "clip the global gradient norm to 1.0 (a top-level key, not inside the optimizer; DeepSpeed's default is 1.0 "
    "too, 0 turns clipping off)":
        "把全局梯度范数裁剪到 1.0（这是顶层的键，不在 optimizer 里；DeepSpeed 的默认值也是 1.0，0 表示关闭裁剪）",
    "{where}: the learning rate at step {i}": "{where}：第 {i} 步的学习率",
    "{lr:.3g} (warmup 0 -> 6e-3 over 15 steps, then down to 0 at step 100)":
        "{lr:.3g}（15 步内从 0 预热到 6e-3，然后在第 100 步降到 0）",
    "no 'scheduler' block: the lr stays at the optimizer's lr; add WarmupDecayLR":
        "没有 'scheduler' 块：学习率一直是优化器的 lr；加上 WarmupDecayLR",
    "WarmupLR warms up and then stays at its maximum; the brief decays to 0 at step 100: that is WarmupDecayLR "
    "(with total_num_steps)":
        "WarmupLR 预热之后就停在最大值；任务要求在第 100 步衰减到 0：那是 WarmupDecayLR（要配上 total_num_steps）",
    "scheduler type {type}: the brief's schedule is DeepSpeed's WarmupDecayLR":
        "scheduler 的 type 是 {type}：任务要求的调度是 DeepSpeed 的 WarmupDecayLR",
    "DeepSpeed's default warmup_type is 'log' (a fast start, then slow); the brief asks for a straight line: "
    "\"warmup_type\": \"linear\"":
        "DeepSpeed 默认的 warmup_type 是 'log'（先快后慢）；任务要求的是一条直线：\"warmup_type\": \"linear\"",
    "warmup_max_lr is {got} (DeepSpeed's default is 0.001, whatever the optimizer's lr): set it to the peak lr, {lr}":
        "warmup_max_lr 是 {got}（DeepSpeed 的默认值是 0.001，不管优化器的 lr 是多少）：把它设成峰值学习率 {lr}",
    "warmup_num_steps: the warmup lasts {n} steps": "warmup_num_steps：预热持续 {n} 步",
    "total_num_steps: the lr reaches 0 at step {n}": "total_num_steps：学习率在第 {n} 步降到 0",
    "warmup_min_lr: the warmup starts from 0": "warmup_min_lr：预热从 0 开始",
    "compare your scheduler block with the brief": "把你的 scheduler 块和任务要求逐项对照",
    # the engine
    "training with your config on {n} ranks": "在 {n} 个 rank 上用你的配置训练",
    "zerolab.course.checks.full_tracebacks(), then run again, shows the rank's error":
        "运行 zerolab.course.checks.full_tracebacks() 后再运行一次，就能看到该 rank 的错误",
    "the engine on {n} ranks, rank {r}": "{n} 个 rank 上的引擎，rank {r}",
    "{where}: stage {stage}, host memory: parameters {params:,} bytes, optimizer states {states:,} bytes\n"
    "  expected: stage 3, both in host memory\n  hint: offload_param and offload_optimizer to the cpu":
        "{where}：stage {stage}，主机内存：参数 {params:,} 字节，优化器状态 {states:,} 字节\n"
        "  期望：stage 3，两者都在主机内存里\n  提示：offload_param 和 offload_optimizer 都卸载到 cpu",
    "{where}: learning rates {mine}\n  expected: {ref}\n  hint: the scheduler block":
        "{where}：学习率 {mine}\n  期望：{ref}\n  提示：看 scheduler 块",
    "{where}: the losses differ from the brief's config\n  expected: {ref}\n  yours:    {mine}\n"
    "  hint: some setting changes the training; compare key by key":
        "{where}：损失与任务要求的配置不同\n  期望：{ref}\n  你的：{mine}\n  提示：某个设置改变了训练；逐个键对照",
    # what passed
    "alone: your config loads on {sizes} ranks with every choice of the brief,":
        "单独检查：你的配置在 {sizes} 个 rank 上都能加载，任务要求的每一项都对，",
    "       and its scheduler gives the brief's lr at each of the {n} steps":
        "          它的调度器在 {n} 步中的每一步都给出任务要求的学习率",
    "engine: {w} ranks, micro-batch {micro} x 2 accumulation steps x {w} ranks = {batch}; stage {stage}, {dtype};":
        "引擎：{w} 个 rank，微批次 {micro} x 2 个累积步 x {w} 个 rank = {batch}；stage {stage}，{dtype}；",
    "        parameter shards and optimizer states in host memory;": "      参数分片和优化器状态都在主机内存里；",
    "        {n} steps: losses and lrs the same as the brief's config": "      {n} 步：损失和学习率都与任务要求的配置相同",
    "your config runs the capstone: ZeRO-3, both offloads, bf16, WarmupDecayLR,\n"
    "  and a global batch of {batch} on {n} world sizes (trained on {worlds} ranks)":
        "你的配置能跑综合项目：ZeRO-3、两种卸载、bf16、WarmupDecayLR，\n"
        "  在 {n} 种总 rank 数下全局 batch 都是 {batch}（在 {worlds} 个 rank 上训练过）",
}

# -- exercise 13: qwZ's block quantizer -------------------------------------------------------------
ZH["checks.ch13"] = {
    "its shape became {shape}": "它的形状变成了 {shape}",
    "element {i} was {was:.6g}, is now {now:.6g}": "第 {i} 个元素原为 {was:.6g}，现为 {now:.6g}",
    "{name} is the caller's tensor (in the engine: the rank's parameter shard, which the next gather sends again). "
    "Compute on a copy: x.float() is x itself when x is already float32, so mul_, div_, round_ or clamp_ on it write "
    "into the caller's tensor; use x * s, or x.float().clone()":
        "{name} 是调用方的张量（在引擎里就是本 rank 的参数分片，下一次 gather 还要再发它）。请在副本上计算："
        "x 本来就是 float32 时，x.float() 返回的就是 x 本身，对它做 mul_、div_、round_ 或 clamp_ 会写进调用方的张量；"
        "请写成 x * s，或者 x.float().clone()",
    "q and scales are the tensors the all-gather received; return a new tensor (q.float() * scale), never write "
    "into them":
        "q 和 scales 是 all-gather 收到的张量；请返回一个新张量（q.float() * scale），不要写进它们",
    "{what} changed its input {name} in place: {change}": "{what} 原地修改了它的输入 {name}：{change}",
    # the cases (zerolab.course.checks.ch13.CASES)
    "a weight shard in fp16, 4 blocks of 96": "fp16 的权重分片，4 个块，每块 96 个元素",
    "4 blocks whose magnitudes differ by powers of ten": "4 个数量级依次差 10 倍的块",
    "a 2-D tensor (16 x 24): blocks are runs of the flat tensor": "二维张量（16 x 24）：块是展平后张量中连续的一段",
    "each block's largest magnitude is positive (+1.0)": "每个块中绝对值最大的是正数（+1.0）",
    "values halfway between two steps (x * 128 = k / 2)": "恰好落在两个量化步中间的值（x * 128 = k / 2）",
    "a block of zeros beside a block of values": "一个全零的块和一个有值的块",
    "int4 (bits=4: qgZ uses the same quantizer)": "int4（bits=4：qgZ 用的是同一个量化器）",
    "many small blocks (8 elements each)": "许多小块（每块 8 个元素）",
    "hint: {hint}": "提示：{hint}",
    "dequantize, {where}": "dequantize 检查：{where}",
    "{what}: {numel} x {dtype}, groups={groups}, bits={bits}": "{what}：{numel} 个 {dtype}，groups={groups}，bits={bits}",
    # quantize
    "quantize returned {type}": "quantize 返回了 {type}",
    "return a pair of tensors: (q, scales)": "返回一对张量：(q, scales)",
    "q: expected int8, {n} values; yours {dtype}, {numel} values": "q：期望 int8、{n} 个值；你的是 {dtype}、{numel} 个值",
    "one int8 per element (that byte instead of bf16's two is what halves qwZ's all-gathers): round, clamp, then "
    ".to(torch.int8)":
        "每个元素一个 int8（用这一个字节代替 bf16 的两个字节，qwZ 的 all-gather 才减半）：先 round，再 clamp，"
        "然后 .to(torch.int8)",
    "one scale per block: groups of them": "每个块一个缩放因子：一共 groups 个",
    "cut the flat tensor into groups = {groups} blocks of numel // groups = {per} elements, one scale each":
        "把展平的张量切成 groups = {groups} 个块，每块 numel // groups = {per} 个元素，每块一个缩放因子",
    "scales: expected {groups} (one per block), yours {n}": "scales：期望 {groups} 个（每块一个），你的是 {n} 个",
    "scales: expected float32, yours {dtype}": "scales：期望 float32，你的是 {dtype}",
    "compute in float32 (x.float()) and return float32 scales: they travel as fp32, 4 bytes per block (DeepSpeed's "
    "kernel computes in fp32 and writes float scales)":
        "用 float32 计算（x.float()）并返回 float32 的缩放因子：它们以 fp32 传输，每块 4 字节"
        "（DeepSpeed 的 kernel 在 fp32 下计算并写出 float 缩放因子）",
    "scales differ from DeepSpeed's: block {diff}": "scales 与 DeepSpeed 的不同：块 {diff}",
    " (x = {x:.6g})": "（此处 x = {x:.6g}）",
    "element {i}{at}: expected {want:.6g}, yours {got:.6g}": "元素 {i}{at}：期望 {want:.6g}，你的是 {got:.6g}",
    "q differs from DeepSpeed's at element {i}: x = {x:.6g}, x * q_scale = {t:.6g}":
        "q 在元素 {i} 处与 DeepSpeed 的不同：x = {x:.6g}，x * q_scale = {t:.6g}",
    "expected q = {want}, yours {got}": "期望 q = {want}，你的是 {got}",
    # the scale
    "a block of zeros gives nan, inf or 0: DeepSpeed's kernel sets q_scale = 1 when the block's max is 0 (so its "
    "scale is 1.0 and every q is 0)":
        "全零的块得出的是 nan、inf 或 0：块的最大值为 0 时，DeepSpeed 的 kernel 令 q_scale = 1"
        "（于是它的 scale 是 1.0，每个 q 都是 0）",
    "one scale for the whole tensor: qwZ keeps one scale per block (max |x| of that block / 2^(bits-1)), so a block "
    "of small values keeps its precision":
        "整个张量只用了一个缩放因子：qwZ 每个块一个（该块的 max |x| / 2^(bits-1)），这样数值小的块也能保住精度",
    "strided blocks (x.view(-1, groups)): a block is a contiguous run of numel // groups elements of the flat "
    "tensor: x.reshape(groups, -1)":
        "块取成了跨步的（x.view(-1, groups)）：一个块是展平张量中连续的 numel // groups 个元素：x.reshape(groups, -1)",
    "max |x| / 127 (the textbook symmetric scale): DeepSpeed maps max |x| to 2^(bits-1) = 128 steps (q_scale = "
    "2^bits / (2 max)) and clamps the top to 127; its scale is max |x| / 128":
        "max |x| / 127（教科书上的对称缩放）：DeepSpeed 把 max |x| 映射到 2^(bits-1) = 128 步"
        "（q_scale = 2^bits / (2 max)），再把顶端 clamp 到 127；它的 scale 是 max |x| / 128",
    "that is q_scale, the multiplier: DeepSpeed stores and sends its inverse, the step scale = 1 / q_scale = max |x| "
    "/ 2^(bits-1)":
        "那是 q_scale，也就是乘数：DeepSpeed 存储并发送的是它的倒数，即步长 scale = 1 / q_scale = max |x| / 2^(bits-1)",
    "asymmetric (max - min) / 255: qwZ's quantizer is symmetric: the scale comes from max |x| alone, no offset, 0 "
    "stays 0":
        "非对称的 (max - min) / 255：qwZ 的量化器是对称的：scale 只由 max |x| 决定，没有偏移，0 还是 0",
    "max |x| / 2^bits: the range -max..max is 2^bits steps of 2 max / 2^bits = max / 2^(bits-1)":
        "max |x| / 2^bits：-max..max 这个区间是 2^bits 步，每步 2 max / 2^bits = max / 2^(bits-1)",
    "bits is a parameter: with bits=4 (qgZ) the scale is max |x| / 2^(4-1) = max / 8, not max / 128 (no hard-coded "
    "127 or 128)":
        "bits 是参数：bits=4（qgZ）时 scale 是 max |x| / 2^(4-1) = max / 8，而不是 max / 128（不要写死 127 或 128）",
    "almost: compute in float32 (x.float()): DeepSpeed's kernel reads fp16 values but computes max, q_scale and "
    "x * q_scale in fp32; fp16 arithmetic rounds them":
        "差一点：用 float32 计算（x.float()）：DeepSpeed 的 kernel 读入 fp16 的值，但 max、q_scale 和 "
        "x * q_scale 都在 fp32 下计算；用 fp16 算会把它们舍入",
    "scale = 1 / q_scale with q_scale = 2^bits / (2 max|x|) per block (= max|x| / 2^(bits-1))":
        "scale = 1 / q_scale，其中每个块的 q_scale = 2^bits / (2 max|x|)（= max|x| / 2^(bits-1)）",
    # the values
    "your values are truncated toward zero (.to(torch.int8) cuts off the fraction): round first, torch.round (half "
    "to even, as the kernel's float-to-int conversion)":
        "你的值被向零截断了（.to(torch.int8) 会砍掉小数部分）：先用 torch.round 舍入"
        "（四舍六入五成双，和 kernel 的浮点转整数一样）",
    "your values are rounded down (floor): round to nearest, torch.round": "你的值是向下取整的（floor）：要用 torch.round 舍入到最近的整数",
    "the block's largest positive value x = max lands on 2^(bits-1) = {top} steps, which does not fit in int{bits} "
    "and wraps to {lo}: clamp to [{lo}, {hi}] before converting":
        "块中最大的正值 x = max 落在 2^(bits-1) = {top} 步上，int{bits} 放不下，回绕成了 {lo}："
        "转换前先 clamp 到 [{lo}, {hi}]",
    "halfway values round the wrong way: DeepSpeed rounds half to even (2.5 -> 2, 3.5 -> 4), which torch.round "
    "does; floor(x + 0.5) or round-half-away-from-zero do not":
        "恰在中间的值舍入方向错了：DeepSpeed 是四舍六入五成双（2.5 -> 2，3.5 -> 4），torch.round 就是这样；"
        "floor(x + 0.5) 或远离零的四舍五入都不是",
    "values outside [{lo}, {hi}]: clamp to the signed {bits}-bit range": "有值超出了 [{lo}, {hi}]：用 clamp 限制在有符号 {bits} 位整数的范围内",
    "q = clamp(round(x * q_scale), -2^(bits-1), 2^(bits-1) - 1) with q_scale = 2^bits / (2 max|x|) of x's block, "
    "in fp32":
        "q = clamp(round(x * q_scale), -2^(bits-1), 2^(bits-1) - 1)，其中 q_scale = 2^bits / (2 max|x|) 取自 x 所在的块，"
        "在 fp32 下计算",
    # dequantize
    "{dtype}, {n} values": "{dtype}，{n} 个值",
    "expected float values, {n} of them; yours {shape}": "期望 {n} 个浮点值；你的是 {shape}",
    "return q * scale as a float tensor with one value per element of q": "返回 q * scale，一个浮点张量，q 的每个元素对应一个值",
    "you divide by the scale: DeepSpeed's scale is the step size, so the value is q * scale":
        "你除以了 scale：DeepSpeed 的 scale 是步长，所以值是 q * scale",
    "strided blocks: scale b belongs to elements b * block .. (b + 1) * block - 1 (contiguous): "
    "q.reshape(len(scales), -1) * scales[:, None]":
        "块取成了跨步的：scale b 属于元素 b * block .. (b + 1) * block - 1（连续的一段）："
        "q.reshape(len(scales), -1) * scales[:, None]",
    "an extra factor of 128: the stored scale already is the step size (max / 2^(bits-1))":
        "多了一个 128 的因子：存下来的 scale 已经是步长了（max / 2^(bits-1)）",
    "values = q * scale, block by block: q.reshape(len(scales), -1).float() * scales[:, None], flat":
        "值 = q * scale，逐块计算：q.reshape(len(scales), -1).float() * scales[:, None]，再展平",
    # the engine
    "the engine on {n} ranks (qwZ with your quantizer)": "{n} 个 rank 上的引擎（qwZ 用你的量化器）",
    "your quantize or dequantize raised inside qwZ's all-gather; zerolab.course.checks.full_tracebacks(), then run again, "
    "shows the line":
        "你的 quantize 或 dequantize 在 qwZ 的 all-gather 里抛出了异常；运行 zerolab.course.checks.full_tracebacks() "
        "后再运行一次，就能看到是哪一行",
    "the engine, stage 3 + zero_quantized_weights, rank {r}": "引擎，stage 3 + zero_quantized_weights，rank {r}",
    "{where}: the parameter all-gathers differ from qwZ's with zerolab's quantizer\n  expected: {want}\n"
    "  yours:    {got}":
        "{where}：参数的 all-gather 与用 zerolab 量化器时 qwZ 的不同\n  期望：{want}\n  你的：{got}",
    "one int8 value per element and one fp32 scale per block (groups of them)":
        "每个元素一个 int8 值，每个块一个 fp32 缩放因子（一共 groups 个）",
    "{where}: a weight the forward pass saw is {worst:.2f}x the largest error qwZ allows (half a step of its block, "
    "bf16's rounding, one step for a clamped maximum)":
        "{where}：\n  前向看到的某个权重，误差是 qwZ 允许的最大误差的 {worst:.2f} 倍\n"
        "  （所在块的半步，加上 bf16 的舍入；被 clamp 的最大值允许差一整步）",
    "dequantize must give back q * scale of the same block": "dequantize 必须还原出同一个块的 q * scale",
    "{where}: the losses are {gap:.3g} from those with zerolab's quantizer (tolerance {tol})":
        "{where}：损失与用 zerolab 量化器时相差 {gap:.3g}（容差 {tol}）",
    "compare your round trip with zerolab.zeropp.quant's": "把你的量化、反量化往返结果和 zerolab.zeropp.quant 的对照一下",
    # what passed
    "alone: {n} tensors (fp16, fp32; 1-D, 2-D; 8 and 4 bits): values and scales as DeepSpeed's":
        "单独检查：{n} 个张量（fp16、fp32；一维、二维；8 位和 4 位）：值和缩放因子都与 DeepSpeed 的相同",
    "engine: GPT on {world} ranks as {nodes} nodes of {k}, stage 3, bf16, {steps} steps, your quantizer inside qwZ:":
        "引擎：{world} 个 rank 上的 GPT，分成 {nodes} 个节点、每节点 {k} 个，stage 3，bf16，{steps} 步，"
        "qwZ 里用的是你的量化器：",
    "  rank 0 sent in parameter all-gathers ({links}-node): {q:,.0f} bytes of int8":
        "  rank 0 在参数 all-gather 中发出（{links}-node）：int8 {q:,.0f} 字节",
    "    + {s:,.0f} of fp32 scales, against {plain:,.0f} bytes in bf16: {ratio:.4f}x":
        "    + fp32 缩放因子 {s:,.0f} 字节，相比 bf16 的 {plain:,.0f} 字节：{ratio:.4f}x",
    "  every weight the forward saw within half a step of its block (+ bf16 rounding)":
        "  前向看到的每个权重，误差都在所在块的半步以内（加上 bf16 的舍入）",
    "  the same gathered weights as zerolab's quantizer: {same}; losses within {tol}":
        "  收集到的权重与 zerolab 量化器的相同：{same}；损失相差在 {tol} 以内",
    "your quantize and dequantize are DeepSpeed's symmetric block quantizer on {n} tensors\n"
    "  and carry qwZ's all-gathers in the engine on {world} ranks ({nodes} nodes)":
        "你的 quantize 和 dequantize 在 {n} 个张量上都与 DeepSpeed 的对称分块量化器一致，\n"
        "  并在 {world} 个 rank（{nodes} 个节点）的引擎里承担了 qwZ 的 all-gather",
}

# -- exercise 14: does the move pay? -------------------------------------------------------------------
ZH["checks.ch14"] = {
    "tokens": "个 token",
    "bytes": "字节",
    "forward gather": "前向收集",
    "backward gather": "反向收集",
    "gradients": "梯度",
    ", checkpointing": "，激活检查点",
    "{name} is not written yet (it raised NotImplementedError: {error}). Fill in the cell above, run it, then "
    "this check again.":
        "{name} 还没写（它抛出了 NotImplementedError：{error}）。填好上面的单元格并运行，然后再运行一次这个检查。",
    "{call} raised {error}\n  hint: call it by hand with these arguments to see the line":
        "{call} 抛出了 {error}\n  提示：用这些参数手动调用它，看看是哪一行",
    "{call} returned {got}\n  hint: return one number (a float >= 0)": "{call} 返回了 {got}\n  提示：返回一个数（>= 0 的 float）",
    "two things: {first}; and {second}": "两处问题：{first}；以及 {second}",
    " ({ratio:.3g} x the expected)": "（是期望值的 {ratio:.3g} 倍）",
    "{call}:\n  expected {want:,.0f} {unit}, yours {got:,.0f}{ratio}\n  hint: {hint}":
        "{call}：\n  期望 {want:,.0f} {unit}，你的是 {got:,.0f}{ratio}\n  提示：{hint}",
    "per micro-step: compute {flops} Psi T / (mfu x peak) seconds, traffic 3 x 2 Psi x (N-1)/N / beta seconds; "
    "set them equal and solve for T (Psi cancels)":
        "每个微步：计算 {flops} Psi T / (mfu x peak) 秒，通信 3 x 2 Psi x (N-1)/N / beta 秒；令两者相等，解出 T（Psi 约掉）",
    "compare term by term; leaving each node (N = {n}, {m} nodes of {k}): {parts}":
        "逐项比较；离开每个节点的字节（N = {n}，{m} 个节点，每节点 {k} 个）：{parts}",
    "per step: compute 6 Psi T / (mfu x peak); PCIe: the bytes of this GPU's shard (Psi/N elements) that cross "
    "it, over pcie_Bps; set them equal and solve for T":
        "每步：计算 6 Psi T / (mfu x peak)；PCIe：这张 GPU 的分片（Psi/N 个元素）经过它的字节数除以 pcie_Bps；令两者相等，解出 T",
    "  {peak:>4.0f} TFLOP/s x {mfu:.2f}, {beta:>4.0f} GB/s, N = {n:>4}{ck:<15}: {tokens:>8,.0f} tokens per GPU":
        "  {peak:>4.0f} TFLOP/s x {mfu:.2f}，{beta:>4.0f} GB/s，N = {n:>4}{ck:<10}：每张 GPU {tokens:>8,.0f} 个 token",
    "  {psi:>3.0f}B parameters, N = {n:>4} in nodes of {k}, {on:<11}: {g:>5.3f} Psi leave each node":
        "  {psi:>3.0f}B 参数，N = {n:>4}，每节点 {k} 个，{on:<11}：离开每个节点的字节为 {g:>5.3f} Psi",
    "  {peak:>4.0f} TFLOP/s x {mfu:.2f}, PCIe {pcie:.0f} GB/s, N = {n:>2}, offload {what:<18}: {tokens:>6,.0f} "
    "tokens per GPU":
        "  {peak:>4.0f} TFLOP/s x {mfu:.2f}，PCIe {pcie:.0f} GB/s，N = {n:>2}，卸载 {what:<18}：每张 GPU {tokens:>6,.0f} 个 token",
    "tokens_to_hide equals the simulator's hide_tokens at {n} settings (within 1 %)":
        "tokens_to_hide 在 {n} 组设置下与模拟器的 hide_tokens 一致（误差 1% 以内）",
    "inter_node_bytes equals the simulator's inter-node bytes at {n} settings (within 1 %)":
        "inter_node_bytes 在 {n} 组设置下与模拟器的跨节点字节一致（误差 1% 以内）",
    "offload_hide_tokens equals the simulator's hide_tokens at {n} settings (within 1 %)":
        "offload_hide_tokens 在 {n} 组设置下与模拟器的 hide_tokens 一致（误差 1% 以内）",
    # the mistakes a learner is likely to make (TOKENS_MISTAKES, BYTES_MISTAKES, OFFLOAD_MISTAKES)
    "each rank sends (N-1)/N of every tensor it gathers or reduce-scatters (the ring): multiply by (N-1)/N":
        "每个 rank 对它收集或 reduce-scatter 的每个张量只发出 (N-1)/N（环形算法）：要乘上 (N-1)/N",
    "stage 3 moves the parameters twice (a gather in forward, again in backward) and reduce-scatters the "
    "gradients: 3 x 2 Psi bytes, not stage 2's 2 x 2 Psi":
        "stage 3 把参数搬两次（前向收集一次，反向再一次），再对梯度做 reduce-scatter：3 x 2 Psi 字节，而不是 stage 2 的 2 x 2 Psi",
    "stage 3 moves three tensors of Psi elements per micro-step (two gathers, one reduce-scatter), not one":
        "stage 3 每个微步搬三个 Psi 元素的张量（两次收集、一次 reduce-scatter），而不是一个",
    "bf16/fp16 on the wire: 2 bytes per element, not 4": "传输的是 bf16/fp16：每个元素 2 字节，不是 4",
    "bf16/fp16 on the wire: 2 bytes per element, not 1": "传输的是 bf16/fp16：每个元素 2 字节，不是 1",
    "the GPU computes at mfu x peak_flops, not at its peak": "GPU 实际的算力是 mfu x peak_flops，不是峰值算力",
    "with activation checkpointing the forward runs twice: 8 Psi FLOPs per token, not 6":
        "开激活检查点时前向要跑两遍：每个 token 8 Psi 次浮点运算，不是 6",
    "2 Psi FLOPs per token is the forward alone; training (forward + backward) is 6 Psi (8 with checkpointing)":
        "每个 token 2 Psi 次浮点运算只是前向；训练（前向 + 反向）是 6 Psi（开检查点时是 8）",
    "a ring gather or reduce-scatter over N ranks sends (N-1)/N of the tensor out of each node, not all of it "
    "(the node's own share stays home)":
        "N 个 rank 上的环形收集或 reduce-scatter 从每个节点发出张量的 (N-1)/N，而不是全部（节点自己那份留在本节点）",
    "qgZ's step between nodes sends (m-1)/m of the node's 4-bit gradients (m = N/k nodes): the node's own share "
    "stays home":
        "qgZ 在节点之间的那一步发出本节点 4 bit 梯度的 (m-1)/m（m = N/k 个节点）：节点自己那份留在本节点",
    "with hpZ the backward gather runs inside the node (the secondary partition): no parameter bytes leave the "
    "node in backward":
        "用 hpZ 时反向收集在节点内完成（二级分片）：反向时没有参数字节离开节点",
    "qwZ sends int8: 1 byte per element (plus a scale per 8,000), not 2":
        "qwZ 发送 int8：每个元素 1 字节（外加每 8,000 个一个缩放因子），不是 2",
    "qwZ sends int8: 1 byte per element, not 4 bits (4 bits is qgZ's, for gradients)":
        "qwZ 发送 int8：每个元素 1 字节，不是 4 bit（4 bit 是 qgZ 用于梯度的）",
    "DeepSpeed quantizes every weight all-gather, the backward one too (when hpZ does not keep it inside the node)":
        "DeepSpeed 会量化每一次权重 all-gather，反向那次也是（只要 hpZ 没把它留在节点内）",
    "qwZ quantizes the weights only; the gradients stay 2-byte unless qgZ is on":
        "qwZ 只量化权重；除非打开 qgZ，梯度仍是 2 字节",
    "count the whole node: each of its k ranks sends its own Psi/k share of the 4-bit gradients across, so "
    "(m-1)/m x Psi x 0.5 bytes leave the node":
        "按整个节点算：它的 k 个 rank 各自把 4 bit 梯度中自己那份 Psi/k 发出去，所以离开节点的是 (m-1)/m x Psi x 0.5 字节",
    "qgZ's step between nodes is an all-to-all among the m = N/k ranks with the same local index: (m-1)/m, not "
    "(N-1)/N":
        "qgZ 在节点之间的那一步，是本地编号相同的 m = N/k 个 rank 之间的 all-to-all：(m-1)/m，不是 (N-1)/N",
    "qgZ sends gradients in 4 bits: 0.5 bytes per element": "qgZ 用 4 bit 发送梯度：每个元素 0.5 字节",
    "qgZ sends gradients in 4 bits: 0.5 bytes per element, not 2": "qgZ 用 4 bit 发送梯度：每个元素 0.5 字节，不是 2",
    "qgZ's first all-to-all stays inside the node (NVLink): only the second one, between nodes, leaves it":
        "qgZ 的第一次 all-to-all 留在节点内（NVLink）：只有第二次、节点之间的那次才离开节点",
    "with a single node (N = ranks_per_node) every collective stays inside it: nothing leaves the node":
        "只有一个节点时（N = ranks_per_node），所有集合通信都留在节点内：没有东西离开节点",
    "each GPU moves only its own shard over its own PCIe link: Psi/N elements, not Psi":
        "每张 GPU 只通过自己的 PCIe 链路搬自己的分片：Psi/N 个元素，不是 Psi",
    "per element of the shard, offload_optimizer moves the gradients down as fp32 (DeepSpeed converts them on "
    "the GPU before the copy: 4 bytes, not the ZeRO-Offload paper's 2) AND the updated 16-bit parameters up (2 "
    "bytes): 4 + 2 bytes":
        "对分片的每个元素，offload_optimizer 把梯度以 fp32 送到主机（DeepSpeed 在拷贝前先在 GPU 上转换：4 字节，"
        "不是 ZeRO-Offload 论文里的 2 字节），并且把更新后的 16 位参数送回 GPU（2 字节），共 4 + 2 字节",
    "offload_optimizer moves each step the gradients down (fp32: 4 bytes) AND the updated 16-bit parameters up "
    "(2 bytes): 4 + 2 bytes per element of the shard":
        "offload_optimizer 每步把梯度送到主机（fp32，4 字节），并且把更新后的 16 位参数送回 GPU（2 字节）：分片的每个元素 4 + 2 字节",
    "with offload_param the shard comes up from the host twice per micro-step: for the forward gather and again "
    "for the backward one":
        "开 offload_param 时，分片每个微步要从主机搬上来两次：前向收集一次，反向收集再一次",
    "only the gradients go down as fp32; the parameters cross PCIe as 2-byte fp16/bf16, not fp32":
        "只有梯度以 fp32 送到主机；参数经过 PCIe 时是 2 字节的 fp16/bf16，不是 fp32",
}

# -- the visual lab (chapter 12): its controls, and its figures where a CJK font is there --------------
ZH["lab"] = {
    # controls (drawn by the browser: always in the edition's language)
    "N ranks": "rank 数 N",
    "stage": "ZeRO 阶段",
    "precision": "精度",
    "paper's ideal (zerolab's switch)": "论文的理想做法（zerolab 的开关）",
    "collective": "集合通信",
    "play": "播放",
    "model": "模型",
    "GPUs": "GPU 数",
    "GB each": "每卡 GB",
    "link": "链路",
    "micro-batch": "微批次",
    "host GB/node": "主机 GB/节点",
    "optimizer": "优化器",
    "params": "参数",
    # figures (zerolab.course.viz.figure_text: English where no CJK font is installed)
    "GB per GPU": "每张 GPU 的 GB",
    "{model} on {gpus} GPUs: what each GPU must hold": "{gpus} 张 GPU 上的 {model}：每张 GPU 要装下什么",
    "seconds per step (simulated)": "每步耗时（秒，模拟）",
    "elements ({n} flat groups)": "元素（{n} 个扁平组）",
    "ms since the step began (rank 0)": "这一步开始后的毫秒数（rank 0）",
    "ms since the step began": "这一步开始后的毫秒数",
    "bytes held (engine.memory())": "持有的字节（engine.memory()）",
    "what each rank holds over the step: model states + buffers in flight": "每个 rank 在这一步中持有多少：模型状态 + 在途的缓冲区",
    "bytes": "字节",
    "held right after this collective": "这次集合通信刚结束时持有的",
    "bytes (engine.memory(where))": "字节（engine.memory(where)）",
    "what each rank holds where, after the step": "这一步之后，每个 rank 在各处持有多少",
    "ms in the recorded step (measured; machine-dependent)": "所记录这一步内的毫秒数（实测；因机器而异）",
    "the step's time: training thread, and I/O threads below": "这一步的时间：训练线程，下方是 I/O 线程",
    # extension mode, ZeRO++ (zerolab/course/lab/zeropp.py): controls, summary, figure
    "ranks": "rank 布局",
    "micro-steps": "微步数",
    "running the engine on the ranks ...": "正在各 rank 上运行引擎……",
    "{n} ranks on one node": "{n} 个 rank 在同一节点",
    "{n} ranks as {m} nodes of {k}": "{n} 个 rank，{m} 个节点，每节点 {k} 个",
    "one micro-step per step": "每步 1 个微步",
    "{g} micro-steps per step": "每步 {g} 个微步",
    "ZeRO++ off": "ZeRO++ 关闭",
    "stage 3, {layout}, bf16, {keys}, {steps}": "stage 3，{layout}，bf16 精度，{keys}，{steps}",
    "Ψ = {psi:,} (four Linear(64, 64)); bytes rank 0 sent in the second step, from the ledger:":
        "Ψ = {psi:,}（四个 Linear(64, 64)）；rank 0 在第二步中发出的字节，取自账本：",
    "inside a node": "节点内",
    "across nodes": "跨节点",
    "forward gathers": "前向收集",
    "backward gathers": "反向收集",
    "gradients": "梯度",
    "total": "合计",
    "formula (the simulator)": "公式（模拟器）",
    "  not in the formula: the gradient norm's all-reduce, {b:,.0f} B":
        "  公式未计入：梯度范数的 all-reduce，{b:,.0f} B",
    "  the formula counts the scales per element (qwZ: 4 B per 8,000, qgZ: 4 B per {w}); "
    "DeepSpeed cuts each shard into whole blocks, so the measured scales are a few more":
        "  公式按元素摊算缩放因子（qwZ：每 8,000 个 4 B，qgZ：每 {w} 个 4 B）；"
        "DeepSpeed 把每个分片切成整块，所以实测的缩放因子略多一些",
    "hpZ's secondary shards after the last backward: {b:,} B per rank = 2 B x {psi:,} / {h} "
    "(formula 2Ψ/h: {f:,.0f} B); after the step: {a:,} B":
        "最后一次反向之后 hpZ 的二级分片：每个 rank {b:,} B = 2 B x {psi:,} / {h}"
        "（公式 2Ψ/h：{f:,.0f} B）；这一步之后：{a:,} B",
    "no secondary shards (hpZ off): the parameters take {b:,} B per rank, the 1/N shard":
        "没有二级分片（hpZ 关闭）：参数每个 rank 占 {b:,} B，即 1/N 的分片",
    "the engine warned: {w}": "引擎警告：{w}",
    "bytes per link": "每条链路上的字节",
    "bytes rank 0 sent in one step (ledger)": "rank 0 一步中发出的字节（账本）",
    "1/N shard": "1/N 分片",
    "hpZ's secondary shard": "hpZ 的二级分片",
    "rank {r}\nnode {m}": "rank {r}\n节点 {m}",
    "parameter bytes after the last backward": "最后一次反向之后的参数字节",
    "what hpZ costs in memory": "hpZ 的显存代价",
    # the printed summaries of every mode (describe(), and the one-line settings also used as figure titles)
    "parameters": "参数",
    "optimizer states": "优化器状态",
    " and ": "和",
    ", ": "、",
    "all": "全部",
    "grads": "梯度",
    "model states": "模型状态",
    "buffers": "缓冲区",
    "stage {stage}, N = {n}: every rank holds all three giants": "stage {stage}，N = {n}：每个 rank 都持有全部三个巨头",
    "stage {stage}, N = {n}: each rank keeps 1/{n} of the {giants}":
        "stage {stage}，N = {n}：每个 rank 保管{giants}的 1/{n}",
    "; all of the {giant}": "；{giant}则是完整的一份",
    "({precision}, Ψ = {psi:,}; bytes measured by engine.memory() on each rank)":
        "（{precision}，Ψ = {psi:,}；字节数由 engine.memory() 在每个 rank 上测得）",
    " ({precision}; bytes measured by engine.memory())": "（{precision}；字节数由 engine.memory() 测得）",
    "DeepSpeed's stage 0 (DDP's reduction): the gradients all-reduced at the boundary, in buckets of 5e8 elements":
        "DeepSpeed 的 stage 0（DDP 的归约）：梯度在累积边界处做 all-reduce，每桶 5e8 个元素",
    "the ZeRO paper's ideal, zerolab's own switch ideal_reduce_scatter (not DeepSpeed's): each gradient bucket "
    "reduce-scattered, the parameters all-gathered after the step: 2Ψ":
        "ZeRO 论文的理想做法，zerolab 自己的开关 ideal_reduce_scatter（不是 DeepSpeed 的）：每个梯度桶做 reduce-scatter，"
        "这一步之后对参数做 all-gather：2Ψ",
    "DeepSpeed's default: each gradient bucket all-reduced (each rank keeps its partition's slices), one all-gather "
    "of the flat parameter buffer after the step: 3Ψ":
        "DeepSpeed 的默认做法：每个梯度桶做 all-reduce（每个 rank 留下自己分区的那几段），这一步之后对扁平参数缓冲区做一次 "
        "all-gather：3Ψ",
    "DeepSpeed's stage 3 at reuse distance 0, prefetch off: each module's parameters all-gathered for forward and "
    "again for backward, gradients reduce-scattered per bucket of parameters: 3Ψ":
        "DeepSpeed 的 stage 3（复用距离 0，不预取）：每个模块的参数为前向 all-gather 一次、为反向再 all-gather 一次，"
        "梯度按参数桶做 reduce-scatter，共 3Ψ",
    "#{i}: {op} '{tag}', {numel:,} elements of {dtype} ({nbytes:,} bytes)\n    each rank puts in {put:,} elements, "
    "keeps {kept:,}, sends {wire:,.0f} bytes":
        "#{i}：{op} '{tag}'，{numel:,} 个 {dtype} 元素（{nbytes:,} 字节）\n    每个 rank 放入 {put:,} 个元素，"
        "留下 {kept:,} 个，发出 {wire:,.0f} 字节",
    "stage {stage}, N = {n}, {precision}: one step, {calls} collectives on each rank":
        "stage {stage}，N = {n}，{precision}：一步，每个 rank 上 {calls} 次集合通信",
    "  {op:<15}{calls:>4} calls {numel:>9,} elements {nbytes:>9,} bytes {wire:>10,.0f} on the wire":
        "  {op:<15}{calls:>4} 次调用 {numel:>9,} 个元素 {nbytes:>9,} 字节，发送 {wire:>10,.0f} 字节",
    "  not counted above: {n} order checks (all_gather, {each} bytes from each rank), zerolab's own safety; "
    "DeepSpeed sends none":
        "  上面没有计入：{n} 次顺序检查（all_gather，每个 rank {each} 字节），这是 zerolab 自己的安全措施；DeepSpeed 没有这些",
    "  rank 0 held at most {total:,} bytes, {label}:": "  rank 0 最多持有 {total:,} 字节，在{label}：",
    "    params {params:,}, grads {grads:,}, optimizer states {states:,}, buffers {buffers:,}":
        "    参数 {params:,}，梯度 {grads:,}，优化器状态 {states:,}，缓冲区 {buffers:,}",
    "start of the step": "这一步开始时",
    "after forward": "前向之后",
    "after backward": "反向之后",
    "after the optimizer step": "优化器更新之后",
    "after {op} '{tag}'": " {op} '{tag}' 之后",
    "nothing fits: more GPUs, more memory (GPU or host), or a smaller micro-batch":
        "什么都装不下：要么加 GPU，要么加大显存或主机内存，要么减小微批次",
    "fastest that fits: {name}, {s:.2f} s per step": "装得下的配置中最快的：{name}，每步 {s:.2f} 秒",
    " ({names} as fast)": "（{names} 一样快）",
    "{model} on {gpus} x {gpu} with {gb:.0f} GB each, {link},": "{model}，{gpus} x {gpu}，每张 {gb:.0f} GB，{link}，",
    "{host:,.0f} GB of host memory; sequence {seq}, micro-batch {mb}": "主机内存 {host:,.0f} GB；序列长度 {seq}，微批次 {mb}",
    "configuration": "配置",
    "GB/GPU": "每卡 GB",
    "DS est.": "DS 估算",
    "host GB": "主机 GB",
    "fits": "装得下",
    "step s": "每步耗时 s",
    "tokens/s": "token/秒",
    "bound by": "瓶颈",
    "yes": "是",
    "NO": "否",
    "compute": "计算",
    "communication": "通信",
    "PCIe transfers": "PCIe 传输",
    "CPU optimizer": "CPU 优化器",
    "GB = 1e9 bytes. DS est.: DeepSpeed's model-state estimator (no activations); host GB: all nodes":
        "GB = 1e9 字节。DS 估算：DeepSpeed 的模型状态估算器（不含激活值）；主机 GB：所有节点合计",
    "step s: zerolab.tools.simulate with DeepSpeed's traffic per step: 2Ψ at stage 0, 3Ψ at stages 1-3":
        "每步耗时（秒）：zerolab.tools.simulate，按 DeepSpeed 每步的通信量：stage 0 为 2Ψ，stage 1-3 为 3Ψ",
    "{stage} + offload {what}": "{stage} + 卸载 {what}",
    "optimizer states on the device": "优化器状态在设备上",
    "optimizer states in host memory": "优化器状态在主机内存里",
    "optimizer states on NVMe": "优化器状态在 NVMe 上",
    " (pipelined {which})": "（流水线：{which}）",
    " (no pipelining)": "（无流水线）",
    "read": "读",
    "write": "写",
    "  ({pattern})": "  （{pattern}）",
    ", parameter shards on the device": "，参数分片在设备上",
    ", parameter shards in host memory": "，参数分片在主机内存里",
    ", parameter shards on NVMe": "，参数分片在 NVMe 上",
    "stage {stage}, N = {n}, {precision}: {opt}, sub_group_size {sg:,}":
        "stage {stage}，N = {n}，{precision}：{opt}，子组大小（sub_group_size）{sg:,}",
    "the engine's switches (engine.switches()):": "引擎的开关（engine.switches()）：",
    "bytes after the step (engine.memory(where); Ψ = {psi:,}):": "这一步之后的字节（engine.memory(where)；Ψ = {psi:,}）：",
    "where": "位置",
    "device": "设备",
    "host": "主机",
    "nvme": "NVMe 盘",
    "on the device": "在设备上",
    "on the host": "在主机上",
    "on the host, streamed from NVMe": "在主机上，从 NVMe 流式读入",
    "the optimizer step {where}: 1 sub-group of {sizes} elements (rank 0)":
        "优化器更新{where}：1 个子组，{sizes} 个元素（rank 0）",
    "the optimizer step {where}: {n} sub-groups of {sizes} elements (rank 0)":
        "优化器更新{where}：{n} 个子组，分别有 {sizes} 个元素（rank 0）",
    "parameter shards": "参数分片",
    "NVMe during the step, {label} (rank 0): {reads} reads ({read:,} B), {writes} writes ({written:,} B)":
        "这一步中的 NVMe，{label}（rank 0）：读 {reads} 次（{read:,} B），写 {writes} 次（{written:,} B）",
    "stage 3: {n} parameter all-gathers ({numel:,} elements) in the step on rank 0, ":
        "stage 3：rank 0 在这一步中做了 {n} 次参数 all-gather（{numel:,} 个元素），",
    "carrying {ahead} module gathers prefetched ahead": "其中捎带了 {ahead} 个提前预取的模块收集",
    "each just in time, none prefetched": "每次都是用到时才收集，没有预取",
    "; at most {peak:,} B gathered or in flight at once": "；同一时刻最多有 {peak:,} B 已收集或在途",
    # the figures' other texts (legends, row labels, titles)
    "activations": "激活值",
    "working buffers": "工作缓冲区",
    "{cap:.0f} GB per GPU": "每张 GPU {cap:.0f} GB",
    "does\nnot fit": "装\n不下",
    "{giant}: {share}": "{giant}：{share}",
    "whole on every rank": "每个 rank 都有完整的一份",
    "before": "之前",
    "after": "之后",
    "{op} '{tag}'\n{numel:,} elements, {wire:,.0f} B sent per rank":
        "{op} '{tag}'\n{numel:,} 个元素，每个 rank 发出 {wire:,.0f} B",
    "colour: whose values; dark: summed over ranks;\nhatched: arrived from that rank":
        "颜色：谁的值；深色：各 rank 之和；\n斜线：从那个 rank 传来的",
    "compute spans": "计算时段",
    "blocking comm": "阻塞通信",
    "async comm": "异步通信",
    "waits": "等待",
    "the paper's ideal (zerolab's switch)": "论文的理想做法（zerolab 的开关）",
    "DeepSpeed's collectives": "DeepSpeed 的集合通信",
    "stage {stage}, N = {n}, {precision}, {whose}: collective {i} of {calls}":
        "stage {stage}，N = {n}，{precision}，{whose}：第 {i} 次集合通信，共 {calls} 次",
    "in host memory": "在主机内存里",
    "on NVMe": "在 NVMe 上",
    "exposed comm": "暴露的通信",
    "host step": "主机端更新",
    "NVMe I/O threads": "NVMe I/O 线程",
    "parameter gathers": "参数收集",
    "other collectives": "其他集合通信",
    "host step (sub-groups)": "主机端更新（子组）",
    "NVMe: parameter shards": "NVMe：参数分片",
    "NVMe: optimizer states": "NVMe：优化器状态",
    "rank 0's step: when each thing ran, and when the bytes moved (measured; NVMe: light = read, dark = write)":
        "rank 0 的这一步：每件事何时运行，字节何时搬动（实测；NVMe：浅色 = 读，深色 = 写）",
    "buffers on the device over the step: gathered parameters (stage 3) and gradient buckets":
        "这一步中设备上的缓冲区：收集来的参数（stage 3）和梯度桶",
}

# -- zerolab explain: what a DeepSpeed config means (explain.py, cli.py) -----------------------------
ZH["explain"] = {
    "nothing is partitioned (plain data parallelism)": "什么都不分片（普通数据并行）",
    "optimizer states are partitioned": "优化器状态分片",
    "optimizer states and gradients are partitioned": "优化器状态和梯度分片",
    "optimizer states, gradients and parameters are partitioned": "优化器状态、梯度和参数都分片",
    "ZeRO stage {stage} on {world} data-parallel rank(s): {shards}.":
        "ZeRO stage {stage}，{world} 个数据并行 rank：{shards}。",
    "Batch: train_batch_size {batch} = {micro} (micro-batch per rank) x {accum} (gradient accumulation steps) x "
    "{world} (ranks).":
        "批大小：train_batch_size {batch} = {micro}（每个 rank 的微批次）x {accum}（梯度累积步数）x {world}（rank 数）。",
    "Batch: not resolved for {world} rank(s) (see the error); the config gives {given}.":
        "批大小：在 {world} 个 rank 上凑不出来（见报错）；配置里给的是 {given}。",
    "none of the three": "三个都没给",
    "dynamic loss scale from 2^{power}, x2 after {window} clean steps, hysteresis {hysteresis}, floor {floor:g}":
        "动态损失缩放，从 2^{power} 开始，连续 {window} 步无溢出就 x2，hysteresis {hysteresis}，下限 {floor:g}",
    "static loss scale {scale:g}": "静态损失缩放值 {scale:g}",
    "Precision: fp16 model, fp32 master weights; {scale}.": "精度：fp16 模型，fp32 主权重；{scale}。",
    "  fp16.auto_cast: DeepSpeed casts the forward's floating-point inputs to fp16 (not implemented in zerolab).":
        "  fp16.auto_cast：DeepSpeed 会把前向的浮点输入转成 fp16（zerolab 未实现）。",
    "steps with inf/nan gradients skipped": "梯度含 inf/nan 的步会被跳过",
    "no overflow check": "不检查溢出",
    "Precision: bf16 model, fp32 master weights; no loss scaling, {check}.":
        "精度：bf16 模型，fp32 主权重；不做损失缩放，{check}。",
    "Precision: fp32 throughout.": "精度：全程 fp32。",
    "at the accumulation boundary the gradients are all-reduced in buckets of 500,000,000 elements "
    "(DeepSpeed's stage 0 reduces like DDP; reduce_bucket_size is not used)":
        "在累积边界按每桶 500,000,000 个元素对梯度做 all-reduce（DeepSpeed 的 stage 0 和 DDP 一样归约，"
        "不用 reduce_bucket_size）",
    "each bucket is its own flat buffer and is reduce-scattered (each rank receives only its shard: Psi per step, "
    "the ZeRO paper's ideal) [zerolab's own: zerolab.ideal_reduce_scatter; DeepSpeed all-reduces]":
        "每个桶是一块独立的扁平缓冲区，做 reduce-scatter（每个 rank 只收到自己的分片：每步 Psi，即 ZeRO 论文的"
        "理想值）[zerolab 自己的做法：zerolab.ideal_reduce_scatter；DeepSpeed 用 all-reduce]",
    "the parameters form one flat buffer cut into one contiguous partition per rank; each bucket (a range of it) is "
    "reduced to each rank whose partition it touches, one reduce per owner (use_multi_rank_bucket_allreduce false) "
    "[DeepSpeed's]":
        "全部参数拼成一块扁平缓冲区，每个 rank 分到其中连续的一段；每个桶（缓冲区里的一段）归约给它覆盖到的"
        "每个分区的主人，每个主人一次 reduce（use_multi_rank_bucket_allreduce 为 false）[DeepSpeed 的做法]",
    "reduce_scatter false": "reduce_scatter 为 false",
    "reduce_scatter and use_multi_rank_bucket_allreduce true, DeepSpeed's defaults":
        "reduce_scatter 和 use_multi_rank_bucket_allreduce 为 true，即 DeepSpeed 的默认值",
    "the parameters form one flat buffer cut into one contiguous partition per rank; each bucket (a range of it) is "
    "all-reduced and each rank keeps the slices of its partition ({why}: 2 Psi on the wire, not the paper's Psi) "
    "[DeepSpeed's]":
        "全部参数拼成一块扁平缓冲区，每个 rank 分到其中连续的一段；每个桶（缓冲区里的一段）做 all-reduce，"
        "每个 rank 留下落在自己分区里的部分（{why}：线上传输 2 Psi，而不是论文的 Psi）[DeepSpeed 的做法]",
    "at the accumulation boundary {how}": "在累积边界，{how}",
    "during backward, once a bucket's gradients are complete, {how}": "反向传播期间，一个桶的梯度一凑齐，{how}",
    "; after the step the updated partitions are all-gathered, one call (Psi) [DeepSpeed's]":
        "；更新之后，用一次 all-gather 把更新过的分区收集回来（Psi）[DeepSpeed 的做法]",
    "; overlap_comm: each bucket's collective is issued asynchronously as soon as it is complete, while backward "
    "goes on, at most two in flight (DeepSpeed's two IPG buffers)":
        "；overlap_comm：每个桶一凑齐就异步发出它的集合通信，反向传播接着算，最多两个在途（DeepSpeed 的两块 IPG "
        "缓冲区）",
    "Gradient buckets: reduce_bucket_size {size:,} elements ({gb:.2f} GB in {comm}); {how}.":
        "梯度桶：reduce_bucket_size {size:,} 个元素（{comm} 下 {gb:.2f} GB）；{how}。",
    "reduce-scattered (each module's gradient padded to N shards; each rank receives its shards)":
        "做 reduce-scatter（每个模块的梯度补齐到 N 个分片；每个 rank 收到自己的分片）",
    "all-reduced (reduce_scatter false; each rank keeps its shards)":
        "做 all-reduce（reduce_scatter 为 false；每个 rank 留下自己的分片）",
    "issued asynchronously (overlap_comm), one in flight (DeepSpeed's one IPG buffer per dtype)":
        "异步发出（overlap_comm），同时只有一个在途（DeepSpeed 每种 dtype 一块 IPG 缓冲区）",
    "each call blocking (overlap_comm false)": "每次调用都阻塞（overlap_comm 为 false）",
    "Gradients: during backward, collected in buckets of reduce_bucket_size {size:,} elements in the order backward "
    "finishes the modules; each bucket is {verb} in {comm} in one call, {when} [DeepSpeed's].":
        "梯度：反向传播期间，按模块完成反向的先后装进 reduce_bucket_size {size:,} 个元素的桶；每个桶用一次调用、"
        "以 {comm} {verb}，{when}[DeepSpeed 的做法]。",
    "parameters of at most {n:,} elements stay gathered (stage3_param_persistence_threshold)":
        "不超过 {n:,} 个元素的参数收集后常驻（stage3_param_persistence_threshold）",
    ", up to {n:,} elements in all (stage3_model_persistence_threshold)":
        "，常驻总量最多 {n:,} 个元素（stage3_model_persistence_threshold）",
    "following the order recorded in the previous step, each module's fetch also issues one asynchronous all-gather "
    "of the next modules' parameters, up to {size:,} more elements (stage3_prefetch_bucket_size), as long as fewer "
    "than {live:,} are gathered or in flight (stage3_max_live_parameters: the only bound on what is in flight) "
    "[DeepSpeed's]":
        "按上一步记下的顺序，每个模块取参数时顺带异步发出一次 all-gather，预取后面模块的参数，最多再取 {size:,} "
        "个元素（stage3_prefetch_bucket_size），前提是已收集和在途的元素少于 {live:,} 个"
        "（stage3_max_live_parameters：在途量的唯一上限）[DeepSpeed 的做法]",
    "just in time, no prefetch (stage3_prefetch_bucket_size 0)": "用到才取，不预取（stage3_prefetch_bucket_size 为 0）",
    "a module's parameters stay gathered after its forward if the recorded order uses them again within {n:,} "
    "elements (stage3_max_reuse_distance: the last modules of forward are then not gathered again for backward)":
        "按记下的顺序，如果一个模块的参数在 {n:,} 个元素之内还会再用到，前向之后就先不释放"
        "（stage3_max_reuse_distance：这样前向最后几个模块在反向时不必重新收集）",
    "every module is gathered again for backward (stage3_max_reuse_distance 0)":
        "每个模块在反向时都重新收集（stage3_max_reuse_distance 为 0）",
    "Stage 3 fetching: each module's parameters are all-gathered before its forward and again before its backward, "
    "and released after use; {fetch}; {reuse}; {persist}.":
        "Stage 3 取参数：每个模块的参数在它的前向之前 all-gather 一次，反向之前再 all-gather 一次，用完就释放；"
        "{fetch}；{reuse}；{persist}。",
    "qwZ (zero_quantized_weights) [DeepSpeed's ZeRO++]: every all-gather of a module's parameters in forward and "
    "backward carries int8 blocks (each rank's shard in fp16, cut into blocks of a multiple of 8, about 8,000 "
    "elements, by DeepSpeed's rule) plus one fp32 scale per block, in two calls (values, then scales): about half of "
    "fp16/bf16's bytes; each rank dequantizes to fp16, then to the model dtype. The shards and the fp32 master "
    "weights stay exact; the persistent parameters' refresh after the step is not quantized.":
        "qwZ（zero_quantized_weights）[DeepSpeed 的 ZeRO++]：前向和反向里每次 all-gather 模块参数，传的都是 int8 "
        "块（每个 rank 的分片先转成 fp16，再按 DeepSpeed 的规则切成 8 的倍数、约 8,000 个元素一块）外加每块一个 "
        "fp32 缩放因子，分两次调用（先传值，再传缩放因子）：字节数约为 fp16/bf16 的一半；每个 rank 先反量化成 "
        "fp16，再转成模型的 dtype。分片和 fp32 主权重都保持精确；更新之后常驻参数的刷新不量化。",
    "hpZ (zero_hpz_partition_size {h}) [DeepSpeed's ZeRO++]: besides its shard over all ranks, each rank keeps a "
    "secondary shard of each module's parameters over its group of {h} consecutive ranks (one node when that is the "
    "ranks per node), copied from the gathered parameters when a module is released (and at initialization): 1/{h} "
    "of the padded parameters in their dtype, until the next optimizer step drops it. While a module has one, its "
    "all-gathers (prefetches too, quantized with qwZ) run inside the group: each step's backward (and the forward "
    "of later micro-steps under gradient accumulation, and of the first step), so the backward sends no parameter "
    "bytes across nodes. h must divide the world size (DeepSpeed's assert).":
        "hpZ（zero_hpz_partition_size {h}）[DeepSpeed 的 ZeRO++]：除了在全部 rank 上的那份分片，每个 rank 还在"
        "自己所在的 {h} 个相邻 rank 组成的组里，为每个模块的参数保存一份二级分片（每节点 rank 数等于 {h} 时，"
        "一组就是一个节点）。二级分片在模块释放时（以及初始化时）从收集好的参数里拷贝出来，大小是补齐后参数的 "
        "1/{h}，保持参数原来的 dtype，下一次优化器更新时丢弃。模块有二级分片期间，它的 all-gather（预取也一样，"
        "开了 qwZ 时也量化）都在组内完成：每一步的反向（以及梯度累积下后续微步的前向，还有第一步的前向），"
        "所以反向不会有参数字节跨节点传输。h 必须整除 world size（DeepSpeed 的断言）。",
    "qgZ (zero_quantized_gradients) [DeepSpeed's ZeRO++]: with more than one node, each module's gradient is "
    "quantized to int4 (one fp32 scale per block), exchanged by an all-to-all inside the node, summed there and "
    "quantized again, exchanged by an all-to-all across nodes, dequantized and divided by the number of nodes "
    "(DeepSpeed 0.19.8 divides the sum over all ranks by the nodes only: the gradient is ranks-per-node times the "
    "mean); 1-D parameters and sizes not a multiple of 2N are reduce-scattered. With one node it does nothing "
    "(DeepSpeed's condition num_nodes > 1).":
        "qgZ（zero_quantized_gradients）[DeepSpeed 的 ZeRO++]：多于一个节点时，每个模块的梯度量化成 int4（每块一个 "
        "fp32 缩放因子），先在节点内用 all-to-all 交换并求和，再量化一次，跨节点用 all-to-all 交换，反量化后除以"
        "节点数（DeepSpeed 0.19.8 把全部 rank 的和只除以节点数：得到的梯度是均值的“每节点 rank 数”倍）；1 维参数"
        "和大小不是 2N 倍数的参数改用 reduce-scatter。只有一个节点时它什么也不做（DeepSpeed 的条件是 "
        "num_nodes > 1）。",
    "Order checks [zerolab's own, zerolab.order_checks]: a 16-byte all-gather before each unit of parameter "
    "gathers, so that ranks on different paths through the model fail with the modules named instead of hanging; "
    "DeepSpeed sends none, and the ledger files them apart from ZeRO's calls.":
        "顺序检查 [zerolab 自己的做法，zerolab.order_checks]：每收集一组参数之前，先做一次 16 字节的 all-gather；"
        "各 rank 在模型里走了不同路径时，就会报错并点出模块名，而不是卡死。DeepSpeed 不发这种调用，账本把它们和 "
        "ZeRO 的调用分开记。",
    "host (CPU) memory, pinned when a GPU is present": "主机（CPU）内存（有 GPU 时用锁页内存）",
    "host (CPU) memory": "主机（CPU）内存",
    "files under nvme_path ({path}), brought through host memory one sub-group ({size:,} elements) at a time":
        "nvme_path 下的文件（{path}），每次经主机内存搬一个子组（{size:,} 个元素）",
    "not given": "未指定",
    " The next sub-group's read overlaps the current step": "下一个子组的读取与当前的更新重叠",
    " Reads are not overlapped (pipeline_read false)": "读取不重叠（pipeline_read 为 false）",
    "; the previous one's write too.": "；上一个子组的写入也重叠。",
    "; writes are waited for (pipeline_write false).": "；写入要等它完成（pipeline_write 为 false）。",
    "Offload: offload_optimizer.device = {device}: each rank's optimizer states (fp32 master weights and Adam "
    "moments, 12 bytes per parameter of its shard) and, at stages 2-3, its fp32 gradient shard (4 bytes) live in "
    "{where}; the optimizer step runs there, sub-group by sub-group (DeepSpeed: DeepSpeedCPUAdam; zerolab: the "
    "torch optimizer, foreach form), and updated parameters are copied back to the device.{pipe}":
        "卸载：offload_optimizer.device = {device}：每个 rank 的优化器状态（fp32 主权重和 Adam 的两个矩，即动量与方差，分片里"
        "每个参数 12 字节）以及 stage 2-3 下它的 fp32 梯度分片（4 字节）放在{where}；优化器更新也在那里一个子组"
        "一个子组地做（DeepSpeed 用 DeepSpeedCPUAdam；zerolab 用 torch 优化器的 foreach 实现），更新后的参数再拷回"
        "设备。{pipe}",
    " (the first {n:,} elements stay in host memory)": "（前 {n:,} 个元素留在主机内存）",
    "Offload: offload_param.device = {device}: each rank's stage-3 parameter shards live in {where}{keep} and are "
    "copied to the device when their module is gathered; persistent (small) parameters stay on the device.":
        "卸载：offload_param.device = {device}：每个 rank 的 stage 3 参数分片放在{where}{keep}，所属模块收集时"
        "拷到设备上；常驻的（小）参数留在设备上。",
    "clipped to global L2 norm {norm:g}": "按全局 L2 范数裁剪到 {norm:g}",
    "off": "关闭",
    "Gradient clipping: {clip}.": "梯度裁剪：{clip}。",
    "Optimizer: {type}, which zerolab does not build (it builds Adam, AdamW and SGD).":
        "优化器：{type}，zerolab 不会构建它（zerolab 只构建 Adam、AdamW 和 SGD）。",
    "Optimizer: none in the config (pass one to zerolab.initialize).":
        "优化器：配置里没有（请把优化器传给 zerolab.initialize）。",
    "Optimizer: {type} (torch.optim.{name}), {params}.": "优化器：{type}（torch.optim.{name}），{params}。",
    "Optimizer step: in sub-groups of at most {size:,} elements of each rank's shard (sub_group_size), one after "
    "another: the unit of the host step and of NVMe swapping; it bounds the step's working memory and changes no "
    "number.":
        "优化器更新：把每个 rank 的分片切成最多 {size:,} 个元素的子组（sub_group_size），一个接一个地更新：它是"
        "主机端更新和 NVMe 换入换出的单位；它限制更新时的工作内存，不改变任何数值。",
    "Learning-rate schedule: {type}({args}), DeepSpeed's formula; the engine steps it after each optimizer step "
    "that is not skipped (an fp16 overflow does not advance it).":
        "学习率调度：{type}({args})，用 DeepSpeed 的公式；引擎在每次没被跳过的优化器更新之后推进它（fp16 溢出的"
        "那一步不推进）。",
    "  - {path} = {value}: {why}": "  - {path} = {value}：{why}",
    "No effect in zerolab (accepted; same numbers as DeepSpeed):":
        "在 zerolab 里不起作用的键（照常接受；数值与 DeepSpeed 相同）：",
}

# -- around the training step: checkpoints, DeepSpeed's API, collectives, topology, models, zerolab train, the
#    simulator (checkpoint.py, checkpoint_read.py, deepspeed.py, comm.py, topology.py, models.py, train.py,
#    simulate.py, calibrate.py, estimate.py) -----------------------------------------------------------------
ZH["around"] = {
    # checkpoints (checkpoint.py, checkpoint_read.py)
    "no 'latest' file in {dir}: pass tag=, or save a checkpoint there first":
        "{dir} 里没有 'latest' 文件：请传 tag=，或者先在那里保存一个检查点",
    "no checkpoint at {path} (meta.json missing)": "{path} 处没有检查点（缺少 meta.json）",
    "checkpoint file {name} is missing from {dir}": "{dir} 里缺少检查点文件 {name}",
    "checkpoint file {path} is corrupted or truncated (its sha256 differs from the one recorded when it was saved)":
        "检查点文件 {path} 已损坏或不完整（它的 sha256 与保存时记录的不一致）",
    "cannot read checkpoint file {path}: {error}": "无法读取检查点文件 {path}：{error}",
    "cannot read {path}: {error}": "无法读取 {path}：{error}",
    "{path} is not a zerolab checkpoint of format {format} (found {found})":
        "{path} 不是格式为 {format} 的 zerolab 检查点（读到的格式是 {found}）",
    "{path}: group {group} has {n} elements in the rank files, meta.json says {want}":
        "{path}：第 {group} 组在各 rank 文件里共有 {n} 个元素，而 meta.json 记的是 {want}",
    "invalid checkpoint tag {tag}": "无效的检查点标签 {tag}",
    "{where}: key {key} must be a string or an int": "{where}：键 {key} 必须是字符串或整数",
    "{where} is a {type}: a checkpoint keeps only tensors, numbers, strings, None and dicts/lists of them, so that "
    "loading it never runs pickled code":
        "{where} 是 {type}：检查点只保存张量、数字、字符串、None 以及由它们组成的 dict/list，这样加载时绝不会执行 "
        "pickle 里的代码",
    "cannot store {type} in meta.json": "无法把 {type} 存进 meta.json",
    "rank {rank}: {error}": "rank {rank} 报错：{error}",
    "; ": "；",
    "{errors}. Nothing was loaded.": "{errors}。什么都没有加载。",
    # a save or load that fails on one rank fails on every rank (checkpoint.py, disk.py)
    "cannot write {path}: {cause}": "无法写入 {path}：{cause}",
    "the previous checkpoint ({tag}) is as it was": "之前的检查点（{tag}）原样保留",
    "no previous checkpoint there": "那里之前没有检查点",
    "checkpoint {tag} was not saved: {errors}. Nothing of it is left in {dir}; {before}.":
        "检查点 {tag} 没有保存成功：{errors}。{dir} 里没有留下它的任何文件；{before}。",
    "cannot read the checkpoint in {dir}: {cause}": "无法读取 {dir} 里的检查点：{cause}",
    "{errors}. The checkpoint was read but could not be put in place on every rank: this engine's state is partly "
    "loaded; close it and start again from the checkpoint.":
        "{errors}。检查点已读出，但没能在每个 rank 上都装载完毕：这个引擎的状态只装载了一部分；请关闭它，"
        "再从检查点重新开始。",
    "the folder {folder} is on a read-only file system: remount it read-write, or use a writable folder":
        "文件夹 {folder} 位于只读文件系统上：请把它重新挂载为可读写，或者换一个可写的文件夹",
    "the disk of {folder} is full ({free} free, about {need} needed)":
        "{folder} 所在的磁盘已满（剩余 {free}，大约需要 {need}）",
    "the disk of {folder} is full ({free} free)": "{folder} 所在的磁盘已满（剩余 {free}）",
    "your disk quota in {folder} is used up": "你在 {folder} 的磁盘配额已用完",
    "{what} (torch said: {error})": "{what}（torch 的报错：{error}）",
    "{what}: free some space there, or use a folder on another disk": "{what}：请在那里腾出空间，或者换用另一块磁盘上的文件夹",
    "permission denied in {folder}: let the user running the ranks ({user}) write there, or use another folder":
        "没有 {folder} 的写权限：请让运行各 rank 的用户（{user}）可以写那里，或者换一个文件夹",
    "{error} (in {folder})": "{error}（在 {folder}）",
    "permission denied reading {path}: let the user running the ranks ({user}) read it":
        "没有读取 {path} 的权限：请让运行各 rank 的用户（{user}）可以读它",
    "{type}: {error}": "{type}：{error}",
    "frozen when this checkpoint was saved (no optimizer state): {names}; pass load_module_only=True to load "
    "the weights and start the optimizer afresh":
        "保存这个检查点时 {names} 是冻结的（没有优化器状态）：请传 load_module_only=True，只加载权重，优化器从头开始",
    "{name}: checkpoint {saved}, model {model}": "{name}：检查点里是 {saved}，模型里是 {model}",
    "missing from the checkpoint: {names}": "检查点里缺少：{names}",
    "not in this model: {names}": "本模型里没有：{names}",
    "different shapes: {shapes}": "形状不同：{shapes}",
    "the checkpoint is of another model ({parts})": "这个检查点属于另一个模型（{parts}）",
    "the checkpoint's buffer {name} does not match this model's": "检查点里的缓冲区 {name} 与本模型的对不上",
    "the checkpoint's optimizer is {saved}, this engine's is {mine}: pass load_optimizer_states=False to load only "
    "the weights":
        "检查点的优化器是 {saved}，本引擎的是 {mine}：请传 load_optimizer_states=False，只加载权重",
    # DeepSpeed's API (deepspeed.py): DeepSpeed's own words stay, quoted after the Chinese
    "Training data must be a torch Dataset":
        "training_data 必须是 torch 的 Dataset（DeepSpeed 的原话：Training data must be a torch Dataset）",
    "deepspeed.initialize requires a model":
        "deepspeed.initialize 需要传入 model（DeepSpeed 的原话：deepspeed.initialize requires a model）",
    "mpu / mesh_param (model or sequence parallelism): zerolab is data parallel only":
        "mpu / mesh_param（模型并行或序列并行）：zerolab 只做数据并行",
    "Not sure how to proceed, we were given deepspeed configs in the deepspeed arguments and "
    "deepspeed.initialize() function call":
        "DeepSpeed 配置给了两份：命令行参数（args.deepspeed_config）里一份，deepspeed.initialize() 的参数里又一份；"
        "请只留一处（DeepSpeed 的原话：Not sure how to proceed, we were given deepspeed configs in the deepspeed "
        "arguments and deepspeed.initialize() function call）",
    "DeepSpeed requires --deepspeed_config to specify configuration file":
        "没有 DeepSpeed 配置：请传 config=（字典或 JSON 文件路径），或者在命令行用 --deepspeed_config 指定配置文件"
        "（DeepSpeed 的原话：DeepSpeed requires --deepspeed_config to specify configuration file）",
    # collectives (comm.py) and the topology (topology.py)
    "this Comm's ranks {ranks} hold a different number of ranks on each node ({topology}); node and cross-node "
    "groups need the same number on every node":
        "这个 Comm 的 rank {ranks} 在各节点上的个数不一样（{topology}）；节点内和跨节点的通信组要求每个节点上的 "
        "rank 数相同",
    "sub_comm({k}): the group size must be a whole number >= 1 that divides the world size {n}":
        "sub_comm({k})：组大小必须是 >= 1 且能整除总 rank 数 {n} 的整数",
    "reduce_scatter: input has {got} elements, expected {n} x {each} (pad the flat buffer to a multiple of the "
    "world size)":
        "reduce_scatter：输入有 {got} 个元素，应为 {n} x {each}（请把扁平缓冲区补齐到总 rank 数的整数倍）",
    "all_gather: output has {got} elements, expected {n} x {each}": "all_gather：输出有 {got} 个元素，应为 {n} x {each}",
    "all_to_all: input of {inp} and output of {out} elements must be equal and cut into {n} chunks":
        "all_to_all：输入（{inp} 个元素）和输出（{out} 个元素）必须一样大，并且能均分成 {n} 块",
    "Topology: world_size must be a whole number >= 1, not {n}": "Topology：world_size 必须是 >= 1 的整数，而不是 {n}",
    "Topology: ranks_per_node={k} must be a whole number >= 1 that divides world_size={n} (every node holds the "
    "same number of ranks, as under torchrun)":
        "Topology：ranks_per_node={k} 必须是 >= 1 且能整除 world_size={n} 的整数（每个节点上的 rank 数相同，"
        "和 torchrun 下一样）",
    "rank {rank} is not in 0..{last}": "rank {rank} 不在 0..{last} 范围内",
    "LOCAL_WORLD_SIZE={per_node} does not divide the world size {world}: zerolab's topology needs the same number "
    "of ranks on every node (torchrun --nproc-per-node)":
        "LOCAL_WORLD_SIZE={per_node} 不能整除总 rank 数 {world}：zerolab 的拓扑要求每个节点上的 rank 数相同"
        "（torchrun --nproc-per-node）",
    # the course's models (models.py)
    "width {d} does not split into {heads} heads": "宽度 {d} 不能均分成 {heads} 个注意力头",
    "{t} tokens, but the model has positions for {n}": "输入有 {t} 个 token，但模型只有 {n} 个位置",
    "no text {name} in {dir}": "{dir} 里没有文本 {name}",
    # zerolab train (train.py)
    "zerolab train: TinyLM ({params:,} parameters) on generated tokens, {config}":
        "zerolab train：TinyLM（{params:,} 个参数），在生成的 token 上训练，{config}",
    "  ZeRO stage {stage}, {world} rank(s) on {device}, {dtype}, global batch {batch} = {micro} x {gas} "
    "(accumulation) x {world}":
        "  ZeRO stage {stage}，{world} 个 rank，在 {device} 上，{dtype}，全局 batch {batch} = {micro} x {gas}"
        "（梯度累积）x {world}",
    "  loss: {first:.4f} at step 1 -> {last:.4f} at step {steps}":
        "  损失：第 1 步 {first:.4f} -> 第 {steps} 步 {last:.4f}",
    " ({n} step(s) skipped: fp16 overflow)": "（跳过了 {n} 步：fp16 溢出）",
    "  lr: {first:.3g} at step 1 -> {last:.3g} at step {steps}": "  学习率：第 1 步 {first:.3g} -> 第 {steps} 步 {last:.3g}",
    "  memory per rank (engine.memory(), at the end):": "  每个 rank 占用的内存（engine.memory()，训练结束时）：",
    "  traffic of rank 0 (engine.ledger; wire bytes by the ring convention):":
        "  rank 0 的通信量（engine.ledger；发送字节数按环形算法的约定计）：",
    "    none (one rank)": "    无（只有一个 rank）",
    "    {op:<15}{calls:>7} calls {bytes:>12} {wire:>12} on the wire": "    {op:<15}{calls:>7} 次调用 {bytes:>12}，发送 {wire:>12}",
    "  time: {seconds:.2f} s for {steps} steps ({ms:.1f} ms per step)":
        "  时间：{steps} 步共 {seconds:.2f} s（每步 {ms:.1f} ms）",
    "  where it went (engine.timeline, rank 0, per step): compute {compute:.1f} ms, exposed communication "
    "{exposed:.1f} ms, hidden {hidden:.1f} ms":
        "  时间花在哪里（engine.timeline，rank 0，每步）：计算 {compute:.1f} ms，暴露的通信 {exposed:.1f} ms，"
        "被藏起来的通信 {hidden:.1f} ms",
    "  picture: {path}": "  图：{path}",
    "  picture: {path}\n  (the current folder; --picture PATH puts it elsewhere, --picture '' draws none)":
        "  图：{path}\n  （在当前文件夹；--picture 路径 可以换个地方，--picture '' 则不画）",
    "  (a uniform guess among {v} tokens scores ln {v} = {ln:.2f}; TinyLM starts far above it: its output\n  head is "
    "tied to the embedding, N(0, 1) at init as nn.Embedding makes it, so at each position\n  its own token gets a "
    "logit near |e|^2 = d = {d}, while the target is the next token)":
        "  （在 {v} 个 token 里均匀瞎猜，损失是 ln {v} = {ln:.2f}；TinyLM 起点远高于此：它的输出层与 embedding\n"
        "  共享权重，初始化时和 nn.Embedding 一样服从 N(0, 1)，于是每个位置上它自己那个 token 的 logit\n"
        "  接近 |e|^2 = d = {d}，而要预测的却是下一个 token）",
    "a config dict": "一个配置字典",
    "{command}: {error}": "{command}：{error}",
    # the simulator (simulate.py, calibrate.py) and DeepSpeed's estimators (estimate.py: its table stays DeepSpeed's)
    "offload_param needs stage 3 (as in DeepSpeed)": "offload_param 需要 stage 3（和 DeepSpeed 一样）",
    "{key} needs stage 3 (as in DeepSpeed: ZeRO++ is stage 3's); set stage=3 or turn it off":
        "{key} 需要 stage 3（和 DeepSpeed 一样：ZeRO++ 是 stage 3 的功能）；请设 stage=3，或者把它关掉",
    "ranks_per_node={k} must divide gpus={n} (whole nodes)": "ranks_per_node={k} 必须整除 gpus={n}（要能分成整数个节点）",
    "inter_link needs ranks_per_node (how many GPUs share a node's link)":
        "inter_link 需要 ranks_per_node（每个节点有几张 GPU 共用节点的链路）",
    "hpz_partition_size={h} must divide gpus={n} (DeepSpeed's rule) and divide ranks_per_node={k} or be a multiple "
    "of it; hpZ's usual size is ranks_per_node":
        "hpz_partition_size={h} 必须整除 gpus={n}（DeepSpeed 的规则），并且要么整除 ranks_per_node={k}，要么是它的"
        "倍数；hpZ 通常取 ranks_per_node",
    "calibrate(..., predict=simulate): call zerolab.tools.simulate.calibrate, which passes it":
        "calibrate(..., predict=simulate)：请调用 zerolab.tools.simulate.calibrate，它会传入 predict",
    "(GiB = 2**30 bytes; DeepSpeed prints these same numbers labelled 'GB')":
        "（GiB = 2**30 字节；DeepSpeed 打印的是同样的数，只是标作 'GB'）",
}

# -- the engine's warnings and errors (the training path: engine.py, attach.py, stage.py, budget.py, ...) ------
ZH["engine"] = {
    "{key} has no effect in zerolab: {why}": "{key} 在 zerolab 里不起作用：{why}",
    "this model already had a zerolab engine: it is closed now (its hooks removed, the model given its full current "
    "weights), and the new engine starts from them":
        "这个模型已经有一个 zerolab 引擎：旧引擎现已关闭（钩子已移除，模型拿回了它当前完整的权重），新引擎从这些"
        "权重开始",
    "{key}={h} is more than the {world_size} ranks: DeepSpeed 0.19.8 takes min({h}, {world_size}) = {size}, one "
    "group of every rank: the backward's gathers stay as wide as the forward's and each rank keeps a second shard "
    "for nothing. Set it to the ranks per node":
        "{key}={h} 超过了 rank 总数 {world_size}：DeepSpeed 0.19.8 取 min({h}, {world_size}) = {size}，所有 rank "
        "成了一组：反向的收集和前向一样宽，每个 rank 白白多存一份二级分片。请把它设成每节点的 rank 数",
    "{key}={h}: hpZ's groups of {size} consecutive ranks span nodes ({topology}), so the backward's gathers cross "
    "nodes (the ledger files them 'inter'); DeepSpeed 0.19.8 allows it. For backward gathers inside a node, set it "
    "to the ranks per node ({per_node}) or a divisor of it":
        "{key}={h}：hpZ 每组 {size} 个相邻 rank，跨了节点（{topology}），所以反向的收集也跨节点（账本记为 "
        "'inter'）；DeepSpeed 0.19.8 允许这样做。想让反向的收集留在节点内，请设成每节点的 rank 数（{per_node}）"
        "或它的约数",
    "zero_quantized_gradients: as in DeepSpeed 0.19.8, qgZ's gradients come out {local}x the mean (ranks per node): "
    "its all-to-all path sums inside each node and divides only by the number of nodes ({nodes}), while its "
    "reduce-scatter fallback (1-D parameters) divides by all {n} ranks. Adam barely notices a constant scale; "
    "gradient clipping and the reported gradient norm see it":
        "zero_quantized_gradients：和 DeepSpeed 0.19.8 一样，qgZ 得到的梯度是均值的 {local} 倍（每节点 rank 数）："
        "它的 all-to-all 路径在每个节点内求和，之后只除以节点数（{nodes}），而它退回 reduce-scatter 的路径（1 维"
        "参数）除以全部 {n} 个 rank。Adam 几乎察觉不到一个常数倍的缩放；梯度裁剪和报告的梯度范数会受影响",
    # -- the engine's errors (issue 26): the device budget (budget.py) --
    "device_budget must be positive, not {value}": "device_budget 必须是正数，不能是 {value}",
    "device_budget {value}: give bytes as a number or text like '2GB' or '1.5GiB'":
        "device_budget {value}：请用数字给出字节数，或写成 '2GB'、'1.5GiB' 这样的文字",
    "rank {rank}: out of device memory in {where}: {total} needed, the budget is {capacity} (device_budget). "
    "Biggest consumers:":
        "rank {rank}：{where}时显存不足：需要 {total}，显存预算只有 {capacity}（device_budget）。占用最多的几项：",
    "plus the activations and buffers measured so far": "再加上目前测到的激活值和缓冲区",
    "activations not measured yet: they come on top": "激活值还没有测到：它们要另外加上",
    "Configs whose device memory would fit (model states by the formula, {measured}):":
        "显存装得下的配置（模型状态按公式估算，{measured}）：",
    "No ZeRO stage or offload fits this budget with these activations: lower the micro batch (activations), "
    "recompute activations (torch.utils.checkpoint), or add ranks.":
        "在这样的激活值下，没有哪个 ZeRO stage 或卸载方式装得进这个显存预算：请减小微批次（减少激活值）、"
        "做激活重计算（torch.utils.checkpoint），或者增加 rank。",
    # where the budget ran out (budget.WHERE) and what it names (budget.CONSUMERS)
    "forward": "前向",
    "backward": "反向",
    "the optimizer step": "优化器更新",
    "a parameter gather": "参数收集",
    "set-up (model states)": "初始化（放置模型状态）",
    "params": "参数（params）",
    "grads": "梯度（grads）",
    "optimizer_states": "优化器状态（optimizer_states）",
    "buffers (buckets, gathered parameters)": "缓冲区（梯度桶、收集来的参数）",
    "activations": "激活值（activations）",
    "allocated by torch on the GPU": "torch 在 GPU 上分配的显存",
    # -- the loss scaler (loss_scaler.py): the floor, bad settings, the lines engine.log prints --
    "iteration {iteration}: the gradients overflowed (inf/NaN) and the loss scale is already at its minimum, "
    "{scale}, so it cannot be lowered any further; stopping the run, as DeepSpeed does. Inf/NaN even at this scale "
    "usually means the model itself diverged (learning rate too high, a bad batch, an operation that overflows "
    "fp16), not that the scale is too big. Lower fp16.min_loss_scale only if you know the scale is the problem; "
    "bf16 avoids loss scaling altogether.":
        "第 {iteration} 次迭代：梯度溢出（inf/NaN），而损失缩放值已经在最小值 {scale}，无法再降低；和 DeepSpeed "
        "一样，训练到此停止。即使在这个最小的缩放值下仍出现 inf/NaN，通常说明模型本身发散了（学习率太高、某个坏的 "
        "batch、某个在 fp16 下会溢出的运算），而不是缩放值太大。只有确定问题出在缩放值上时，才去调低 "
        "fp16.min_loss_scale；改用 bf16 则完全不需要损失缩放。",
    "a loss scale must be a finite number > 0, got {scale}": "损失缩放值必须是大于 0 的有限数，实际是 {scale}",
    "scale_window (fp16.loss_scale_window) must be an integer > 0, got {value}":
        "scale_window（fp16.loss_scale_window）必须是大于 0 的整数，实际是 {value}",
    "min_scale (fp16.min_loss_scale) must be a finite number > 0, got {value}":
        "min_scale（fp16.min_loss_scale）必须是大于 0 的有限数，实际是 {value}",
    "scale_factor must be a finite number > 1, got {value}": "scale_factor 必须是大于 1 的有限数，实际是 {value}",
    "fp16.loss_scale must be >= 0 (0 = dynamic), got {value}": "fp16.loss_scale 必须 >= 0（0 表示动态），实际是 {value}",
    "overflow: skipping step, loss scale stays {scale} (static)": "溢出：跳过这一步，损失缩放值保持 {scale}（静态）",
    "overflow: skipping step, loss scale {old} -> {new}": "溢出：跳过这一步，损失缩放值 {old} -> {new}",
    "overflow: skipping step, loss scale stays {scale} (hysteresis {was} -> {h}: {left})":
        "溢出：跳过这一步，损失缩放值保持 {scale}（hysteresis {was} -> {h}：{left}）",
    "the next overflow lowers it": "下一次溢出就会降低它",
    "it takes {h} more overflows to lower it": "还要再溢出 {h} 次才会降低它",
    "a hysteresis below 1 never runs out: it will not drop": "hysteresis 小于 1 永远用不完：缩放值不会下降",
    "clean step: hysteresis refilled {was} -> {now}": "无溢出的一步：hysteresis 补满 {was} -> {now}",
    "no overflow for {window} steps: loss scale {old} -> {new}": "连续 {window} 步无溢出：损失缩放值 {old} -> {new}",
    # -- ranks that took different paths at stage 3 (trace.py) --
    ", ": "，",
    "ranks ran different modules in this forward: {ranks}{order}": "各 rank 在这次前向里运行的模块不同：{ranks}{order}",
    "rank {rank} gathered {n} module groups": "rank {rank} 收集了 {n} 组模块参数",
    " (or the same number in another order)": "（或者数目相同但顺序不同）",
    "rank {rank} reached the end of its forward": "rank {rank} 已走完自己的前向",
    "ranks ran different modules: {ranks}": "各 rank 运行的模块不同：{ranks}",
    "rank {rank} reached {where}": "rank {rank} 到了 {where}",
    "{what}. With ZeRO stage 3 every rank must run the same modules in the same order (e.g. no rank-dependent "
    "branches, no forward on one rank only).":
        "{what}。在 ZeRO stage 3 下，每个 rank 都必须以相同的顺序运行相同的模块（例如：不能有依 rank 而异的分支，"
        "不能只在某一个 rank 上做前向）。",
    # -- unused parameters with ignore_unused_parameters false (stage.py) --
    " and {n} more": " 以及另外 {n} 个",
    "; on this rank (rank {rank}): {names}{more}": "；本 rank（rank {rank}）上是：{names}{more}",
    "trainable parameters got no gradient in this backward on rank(s) {ranks}{mine}. "
    "zero_optimization.ignore_unused_parameters is false, so this is an error (DeepSpeed's rule); set it to true "
    "(the default) to treat a missing gradient as zero, as DDP with find_unused_parameters=True does, or freeze the "
    "parameter (requires_grad=False).":
        "在 rank {ranks} 上，有可训练参数在这次反向里没有得到梯度{mine}。zero_optimization.ignore_unused_parameters "
        "为 false，所以这是一个错误（DeepSpeed 的规则）；把它设为 true（默认值），缺失的梯度就按零处理，和 DDP 在 "
        "find_unused_parameters=True 时一样；或者冻结这个参数（requires_grad=False）。",
    # -- stage 3's module hooks (hooks.py) --
    "use_module_hooks(cls): cls must be a class with the methods {methods}":
        "use_module_hooks(cls)：cls 必须是一个类，并且有这些方法：{methods}",
    "register_external_parameter: that parameter is not trained by this engine":
        "register_external_parameter：这个参数不归这个引擎训练",
    "parameter {name} was used outside the model's forward (after forward, before backward: in the loss, say). ZeRO "
    "stage 3 keeps only a 1/{n} shard of it on each rank, and gathers it only while a module's forward runs. Compute "
    "with it inside the model's forward (e.g. the top-level forward: zerolab gathers it there), or use ZeRO stage 0-2 "
    "for this model.":
        "参数 {name} 在模型的前向之外用到了（前向之后、反向之前，比如在损失里）。ZeRO stage 3 在每个 rank 上只保留"
        "它的 1/{n} 分片，只在某个模块的前向运行期间才把它收集完整。请在模型的前向里用它（例如在最外层的 forward "
        "里：zerolab 会在那里收集它），或者对这个模型改用 ZeRO stage 0-2。",
    # -- the engine's own (engine.py) --
    "zerolab.initialize needs a torch.distributed process group: call it inside a function run by zerolab.launch / "
    "Crew.run, or under torchrun":
        "zerolab.initialize 需要一个 torch.distributed 进程组：请在由 zerolab.launch / Crew.run 运行的函数里调用它，"
        "或者在 torchrun 下运行",
    "pass either an optimizer built over the parameter groups or param_groups, not both":
        "要么传入一个建立在这些参数组上的优化器，要么传入 param_groups，不要两个都传",
    "the model has no trainable parameters": "这个模型没有可训练的参数",
    "this engine is closed (engine.close(), or a newer zerolab.initialize on the same model): use the new engine":
        "这个引擎已经关闭了（调用过 engine.close()，或者同一个模型上有了更新的 zerolab.initialize）：请用新的引擎",
    "save_checkpoint in the middle of gradient accumulation: the accumulated gradients would be lost; save after the "
    "step at the boundary":
        "在梯度累积的中途调用了 save_checkpoint：已经累积的梯度会丢失；请在累积边界那一步之后再保存",
    "memory(where): 'device', 'host' or 'nvme', not {where}": "memory(where)：应为 'device'、'host' 或 'nvme'，而不是 {where}",
    # -- attaching an engine to a model and its optimizer (attach.py) --
    "param_groups mixes dicts and tensors: give a list of dicts with 'params'":
        "param_groups 里混着字典和张量：请给出一个由带 'params' 的字典组成的列表",
    "a parameter appears in more than one parameter group": "有一个参数出现在不止一个参数组里",
    "the model": "整个模型",
    "ZeRO stage 3 cannot run a torch.compile'd module ({name}): stage 3 gathers and releases each module's "
    "parameters in module hooks, which the compiler cannot trace. Pass the model before torch.compile, or use ZeRO "
    "stage 0-2 (they run compiled models unchanged)":
        "ZeRO stage 3 无法运行经过 torch.compile 的模块（{name}）：stage 3 在模块钩子里收集和释放每个模块的参数，"
        "编译器无法追踪这些操作。请传入 torch.compile 之前的模型，或者改用 ZeRO stage 0-2（它们可以原样运行编译过的"
        "模型）",
    "the optimizer's parameter groups hold frozen parameters ({name}): leave them out, or set requires_grad=True":
        "优化器的参数组里有冻结的参数（{name}）：把它们去掉，或者设置 requires_grad=True",
    "the optimizer holds {n} tensor(s) that are not parameters of the model given to initialize: build it over "
    "model.parameters() (or some of them)":
        "优化器里有 {n} 个张量不是传给 initialize 的模型的参数：请在 model.parameters()（或其中一部分）上构建优化器",
    "zerolab: {n} parameter(s) with requires_grad are not in the optimizer ({names}): they are not trained, as in "
    "DeepSpeed":
        "zerolab：有 {n} 个 requires_grad 的参数不在优化器里（{names}）：和 DeepSpeed 一样，它们不会被训练",
    # -- the memory formulas and measurements (memory.py), precision.py's report --
    "pass model.parameters() (or .buffers(), .state_dict()), not the module: say which tensors you mean":
        "请传入 model.parameters()（或 .buffers()、.state_dict()），而不是模块本身：说清楚你指的是哪些张量",
    "unknown unit {unit}; use 'auto' or one of {units}": "未知的单位 {unit}；请用 'auto' 或以下之一：{units}",
    "precision must be 'fp32', 'fp16' or 'bf16', not {value}": "precision 必须是 'fp32'、'fp16' 或 'bf16'，而不是 {value}",
    "optimizer must be one of {names}, not {value}": "optimizer 必须是 {names} 之一，而不是 {value}",
    "stage must be 0, 1, 2 or 3, not {value}": "stage 必须是 0、1、2 或 3，而不是 {value}",
    "world_size must be >= 1, not {value}": "world_size 必须 >= 1，而不是 {value}",
    "persistent_numel must be in [0, psi], not {value}": "persistent_numel 必须在 [0, psi] 之内，而不是 {value}",
    "underflow_report expects finite magnitudes; these contain inf or NaN":
        "underflow_report 需要有限的数值；这些数里有 inf 或 NaN",
    "scale must be a finite number > 0, got {scale}": "scale 必须是大于 0 的有限数，实际是 {scale}",
    # -- where bytes live (place.py) --
    "an offload device is 'none', 'cpu' or 'nvme', not {device}": "offload 的 device 应为 'none'、'cpu' 或 'nvme'，而不是 {device}",
    # -- building the optimizer over the shards (optim.py) --
    "cannot rebuild {cls} over the shards with the same settings: {settings} is not a constructor argument; pass "
    "the optimizer class or a factory (params -> optimizer) instead":
        "无法用相同的设置在分片上重建 {cls}：{settings} 不是构造函数的参数；请改为传入优化器类，或者一个工厂函数"
        "（params -> optimizer）",
    "optimizer type {type} is not implemented by zerolab (use Adam, AdamW or SGD, or pass a torch optimizer to "
    "initialize)":
        "zerolab 没有实现优化器类型 {type}（请用 Adam、AdamW 或 SGD，或者把一个 torch 优化器传给 initialize）",
    "an optimizer was passed to initialize() and the config has an 'optimizer' block too: give one of them":
        "initialize() 收到了一个优化器，而配置里也有 'optimizer' 块：两者只给一个",
    "no optimizer: add an 'optimizer' block to the config (e.g. {'type': 'AdamW', 'params': {'lr': 1e-3}}) or pass "
    "optimizer=":
        "没有优化器：请在配置里加上 'optimizer' 块（例如 {'type': 'AdamW', 'params': {'lr': 1e-3}}），或者传入 "
        "optimizer=",
    "optimizer must be a torch optimizer class, instance or factory, not {type}":
        "optimizer 必须是 torch 优化器的类、实例或工厂函数，而不是 {type}",
    "{type} is not known to update elements independently, so stepping a shard may not equal stepping the full "
    "parameters; set 'zero_allow_untested_optimizer': true to use it anyway":
        "不确定 {type} 是否逐元素独立地更新，所以在一个分片上更新未必等于在完整参数上更新；如果仍要使用，请设置 "
        "'zero_allow_untested_optimizer': true",
    # -- gradient reduction (reduce.py) --
    "a second gradient for {name} arrived in one backward, after its bucket ({bucket}) was sent: its gradient was "
    "accumulated twice in one backward (e.g. reentrant activation checkpointing), which zerolab does not support; "
    "use torch.utils.checkpoint with use_reentrant=False":
        "在同一次反向里，{name} 的第二个梯度在它所在的桶（{bucket}）发出之后才到达：它的梯度在一次反向里被累加了两次"
        "（例如可重入的激活检查点），zerolab 不支持这种情况；请使用 use_reentrant=False 的 torch.utils.checkpoint",
    "backward was called twice before engine.step() at an accumulation boundary with overlap_comm: call "
    "engine.step() after each backward, as DeepSpeed requires":
        "开启 overlap_comm 时，在累积边界上 engine.step() 之前调用了两次 backward：请按 DeepSpeed 的要求，每次 "
        "backward 之后都调用 engine.step()",
    # -- hpZ's groups (hpz.py); DeepSpeed's assertion stays in its own words --
    "{key}={h} with offload_param on nvme: DeepSpeed 0.19.8 allocates hpZ's secondary shard on the offload device "
    "(partition_parameters.py, _partition_param_sec: torch.empty(..., device='nvme')) and fails. Fix: offload_param "
    "device 'cpu' or 'none', or zero_hpz_partition_size 1":
        "{key}={h} 与卸载到 nvme 的 offload_param 不能同时使用：DeepSpeed 0.19.8 会把 hpZ 的二级分片分配在卸载设备上"
        "（partition_parameters.py，_partition_param_sec：torch.empty(..., device='nvme')），然后失败。修复：把 "
        "offload_param 的 device 设为 'cpu' 或 'none'，或者把 zero_hpz_partition_size 设为 1",
    " (the ranks per node here: {n})": "（这里每节点的 rank 数：{n}）",
    "{key}={h} does not divide the {world_size} ranks: hpZ's groups are h consecutive ranks and DeepSpeed 0.19.8 "
    "asserts that they tile the world (utils/groups.py, _ensure_divisibility: '{world_size} is not divisible by "
    "{size}'). Fix: a divisor of {world_size} ({divisors}), usually the ranks per node{per_node}":
        "{key}={h} 不能整除 rank 总数 {world_size}：hpZ 的每组是 h 个相邻的 rank，DeepSpeed 0.19.8 断言这些组正好"
        "铺满全部 rank（utils/groups.py，_ensure_divisibility：'{world_size} is not divisible by {size}'）。修复：取 "
        "{world_size} 的约数（{divisors}），通常就是每节点的 rank 数{per_node}",
    # -- qwZ's quantizer (quant.py); DeepSpeed's assertion stays in its own words --
    "nothing to quantize: {numel} elements": "没有可量化的内容：{numel} 个元素",
    "DeepSpeed's qwZ quantizer cannot cut {numel} elements into blocks of a multiple of 8 (its CUDAQuantizer asserts "
    "'Quantized weight requires the number of weights be a multiple of 8')":
        "DeepSpeed 的 qwZ 量化器无法把 {numel} 个元素切成大小为 8 的倍数的块（它的 CUDAQuantizer 断言 "
        "'Quantized weight requires the number of weights be a multiple of 8'）",
    "{numel} elements do not cut into {groups} equal blocks": "{numel} 个元素无法切成 {groups} 个等大的块",
    "use_qwz_codec(quantize_fn, dequantize_fn): both must be functions":
        "use_qwz_codec(quantize_fn, dequantize_fn)：两个参数都必须是函数",
    # -- offload to NVMe and host memory (nvme.py, offload.py) --
    "cannot write NVMe swap file {path}: {cause}": "无法写入 NVMe 交换文件 {path}：{cause}",
    "cannot read NVMe swap file {path}: {cause}. {todo}": "无法读取 NVMe 交换文件 {path}：{cause}。{todo}",
    "NVMe swap file {path} is damaged: it ended after {got} of its {n} bytes. {todo}":
        "NVMe 交换文件 {path} 已损坏：读到 {got} 字节就结束了，应有 {n} 字节。{todo}",
    "NVMe swap file {path} is damaged: block {block} (bytes {start} to {end}) differs from what was written there; "
    "it was not used. {todo}":
        "NVMe 交换文件 {path} 已损坏：第 {block} 块（第 {start} 到 {end} 字节）与写入时不一致；它没有被拿来训练。{todo}",
    "Something other than this run changed its files (another process, the disk itself): check the disk, then "
    "resume from your last checkpoint (engine.load_checkpoint)":
        "本次运行之外的东西改动了它的文件（别的进程，或者磁盘本身）：请检查磁盘，然后从最近的检查点恢复"
        "（engine.load_checkpoint）",
    "offload to nvme needs 'nvme_path' (a folder on a fast disk) for the {what}":
        "卸载到 nvme 需要为{what}指定 'nvme_path'（一块高速磁盘上的文件夹）",
    "nvme_path {path} does not exist or is not a folder (create it first)":
        "nvme_path {path} 不存在或不是文件夹（请先创建它）",
    "nvme_path {path} is not writable: {cause}": "nvme_path {path} 不可写：{cause}",
    "nvme_path {path} has {free} free, but the {what} need {need} there: free {short} on that disk, or point "
    "nvme_path at a folder on a disk with more room":
        "nvme_path {path} 只剩 {free} 空间，而{what}在那里需要 {need}：请在那块磁盘上腾出 {short}，或者把 nvme_path "
        "指向一块空间更大的磁盘上的文件夹",
    "optimizer states": "优化器状态",
    "optimizer states (fp32 masters and moments of every rank)": "优化器状态（所有 rank 的 fp32 主权重和两个矩）",
    "parameter shards of every rank": "所有 rank 的参数分片",
    "offload_optimizer.ratio < 1 (partial offload) is not implemented in zerolab":
        "zerolab 没有实现 offload_optimizer.ratio < 1（部分卸载）",
}

# -- the commands' own lines: explain, estimate, consolidate, simulate, bench, train (cli.py, train.py) -----
ZH["cli"] = {
    "zerolab simulate: --inter-link needs --ranks-per-node (how many GPUs share a node's link)":
        "zerolab simulate：--inter-link 需要同时给出 --ranks-per-node（每个节点有几张 GPU 共用节点的链路）",
    "model states per GPU, Psi = {psi:,.0f} parameters, {world} GPU(s), {precision} + Adam ({pb} + {gb} + {ob} bytes "
    "per parameter):":
        "每张 GPU 上的模型状态，Psi = {psi:,.0f} 个参数，{world} 张 GPU，{precision} + Adam（每个参数 {pb} + {gb} + "
        "{ob} 字节）：",
    "   <- this config": "   <- 本配置",
    "  (GB = 1e9 bytes, GiB = 2^30 bytes; activations and buffers come on top)":
        "  （GB = 1e9 字节，GiB = 2^30 字节；激活值和各种缓冲区另算）",
    "params": "参数",
    "grads": "梯度",
    "optimizer": "优化器状态",
    "total": "合计",
    "optimizer states": "优化器状态",
    "none": "无",
    "with this config's offload, per rank at stage {stage} (zerolab runs it; DeepSpeed keeps the same):":
        "按本配置的卸载方式，stage {stage} 下每个 rank 的分布（zerolab 照此运行；DeepSpeed 的放法相同）：",
    "  on the GPU: {what} ({total})": "  GPU 上：{what}（{total}）",
    "  in host (CPU) memory: {what} ({total})": "  主机（CPU）内存里：{what}（{total}）",
    "  on NVMe: {what} ({total})": "  NVMe 上：{what}（{total}）",
    "  (the paper's accounting of model states; gathered layers, buckets and activations stay on the GPU on top; "
    "DeepSpeed's own estimator: zerolab estimate --largest-layer ...)":
        "  （按论文的口径统计模型状态；收集起来的层、梯度桶和激活值另外占 GPU；DeepSpeed 自己的估算器："
        "zerolab estimate --largest-layer ...）",
    "not implemented in zerolab: {path} = {value} ({what}); zerolab.initialize refuses it":
        "zerolab 未实现：{path} = {value}（{what}）；zerolab.initialize 会拒绝它",
    "zerolab explain: {n} errors in {path} (typos, bad values, batch arithmetic; fix them before training):":
        "zerolab explain：{path} 里有 {n} 处错误（拼写、取值或批大小算术；训练前请先改正）：",
    "zerolab explain: 1 error in {path} (typos, bad values, batch arithmetic; fix it before training):":
        "zerolab explain：{path} 里有 1 处错误（拼写、取值或批大小算术；训练前请先改正）：",
    "{command}: {error}": "{command}：{error}",
    "== ZeRO stage 2, DeepSpeed's own estimator (estimate_zero2_model_states_mem_needs_all_cold, reproduced).\n"
    "   Its GPU column counts 2Ψ + 18Ψ/N, 4Ψ/N above the stage-2 row: DeepSpeed's step also holds\n"
    "   an fp32 copy of the gradient shard, and the estimator counts it; it assumes mixed precision.":
        "== ZeRO stage 2，DeepSpeed 自己的估算器（estimate_zero2_model_states_mem_needs_all_cold，照原样复现）。\n"
        "   它的 GPU 列算的是 2Ψ + 18Ψ/N，比 stage 2 那一行多 4Ψ/N：DeepSpeed 的优化器更新还要\n"
        "   放一份 fp32 的梯度分片，估算器把它算了进去；它假定用的是混合精度。",
    "== ZeRO stage 3, DeepSpeed's own estimator (estimate_zero3_model_states_mem_needs_all_cold, reproduced).":
        "== ZeRO stage 3，DeepSpeed 自己的估算器（estimate_zero3_model_states_mem_needs_all_cold，照原样复现）。",
    "wrote {path}: {tensors} tensors, {n:,} elements (fp32 parameters and the model's buffers); load it with "
    "safetensors.torch.load_file and model.load_state_dict":
        "已写出 {path}：{tensors} 个张量，{n:,} 个元素（fp32 参数和模型的缓冲区）；用 safetensors.torch.load_file "
        "和 model.load_state_dict 加载",
    "the simulator against {n} real ranks here (a bf16 MLP of 8 Linear(256, 256), stages 0-3):":
        "模拟器对照本机 {n} 个真实 rank 的实测（由 8 个 Linear(256, 256) 组成的 bf16 MLP，stage 0-3）：",
    "zerolab simulate: --params required (or --calibrate)": "zerolab simulate：缺少 --params（或者改用 --calibrate）",
    "--layers/--hidden not given: {layers} layers, hidden {hidden} ({like}); they set the activations and stage "
    "3's\n  gathered layers and calls, never the model states (those follow --params)":
        "没有给出 --layers/--hidden：取 {layers} 层、hidden {hidden}（{like} 的形状）；它们决定激活值，以及 stage 3\n"
        "  gather 的层和调用次数，不影响模型状态（模型状态只看 --params）",
    "not a parameter count: {text!r} (e.g. 7e9, 7B, 1.3b, 350M)": "不是参数量：{text!r}（例如 7e9、7B、1.3b、350M）",
    "zerolab estimate: --gpus {gpus} (in total) is not --gpus-per-node {per} x --nodes {nodes}":
        "zerolab estimate：--gpus {gpus}（总数）不等于 --gpus-per-node {per} x --nodes {nodes}",
    "zerolab estimate: --gpus {gpus} with --nodes {nodes} is read as GPUs per node ({total} in total), as before;\n"
    "  that meaning is deprecated: say --gpus-per-node {gpus} (DeepSpeed's num_gpus_per_node),\n  or --gpus {total} "
    "--nodes {nodes}: --gpus is the total, as in zerolab simulate":
        "zerolab estimate：--gpus {gpus} 与 --nodes {nodes} 同用时，仍照旧理解为每节点的 GPU 数（共 {total} 张）；\n"
        "  这种含义已弃用：请写 --gpus-per-node {gpus}（即 DeepSpeed 的 num_gpus_per_node），\n"
        "  或者 --gpus {total} --nodes {nodes}：--gpus 是总数，与 zerolab simulate 一致",
    "{link} inside nodes of {k}, {inter} between them": "节点内（每节点 {k} 张）用 {link}，节点间用 {inter}",
    "{params:.3g} parameters, {layers} layers, hidden {hidden}, sequence {seq}, micro-batch {micro} x {accum} "
    "accumulation, on {gpus} x {gpu} over {where}":
        "{params:.3g} 个参数，{layers} 层，隐藏维度 {hidden}，序列长度 {seq}，微批次 {micro} x {accum}（梯度累积），"
        "{gpus} x {gpu}，链路：{where}",
    "{name}: {gb:,.1f} GB leave each node per step; hidden behind compute from {tokens:,.0f} tokens per GPU":
        "{name}：每步有 {gb:,.1f} GB 流出每个节点；每张 GPU 每步有 {tokens:,.0f} 个 token 起，计算就能把它藏住",
    "saved {path}": "已保存 {path}",
    # -- zerolab compare (compare.py) --
    "DeepSpeed is not installed in this Python. Install the reference (CPU build, no ops compiled):\n"
    "    DS_BUILD_OPS=0 pip install 'zerolab[deepspeed]'\n"
    "or point at a venv that has deepspeed==0.19.8: zerolab compare CONFIG --ds-python /path/to/bin/python":
        "当前 Python 里没有安装 DeepSpeed。请安装参照实现（CPU 版，不编译任何算子）：\n"
        "    DS_BUILD_OPS=0 pip install 'zerolab[deepspeed]'\n"
        "或者指向一个装有 deepspeed==0.19.8 的虚拟环境：zerolab compare CONFIG --ds-python /path/to/bin/python",
    "DeepSpeed's run failed (exit {rc}):\n{tail}": "DeepSpeed 运行失败（退出码 {rc}）：\n{tail}",
    "{config} on {world} CPU ranks (gloo), model {model}, steps 3-{steps} (calls over 64 bytes; DeepSpeed {version}):":
        "{config} 在 {world} 个 CPU rank 上（gloo），模型 {model}，第 3-{steps} 步（只计超过 64 字节的调用；"
        "DeepSpeed {version}）：",
    "=> the same calls and bytes": "=> 调用次数和字节数都相同",
    "the losses: equal bit for bit": "损失：逐位相同",
    "{config} cannot run on {world} ranks: {reason}": "{config} 无法在 {world} 个 rank 上运行：{reason}",
    "the losses: at most {gap:.2g} apart": "损失：相差至多 {gap:.2g}",
    "=> DIFFERENT: see the rows marked above": "=> 不同：见上面标出的行",
}


ZH["course"] = {
    "zerolab course: the course's notebooks are not beside this zerolab ({path}); install zerolab from a clone of "
    "the repository (pip install -e .) and run it there":
        "zerolab course：这个 zerolab（{path}）旁边没有课程的 notebook；请从仓库的克隆安装 zerolab"
        "（pip install -e .），再在那里运行",
    "zerolab course: {path} is the stored course itself; choose a folder of its own":
        "zerolab course：{path} 就是仓库里存放的课程本身；请另选一个文件夹",
    "your working copy of the course: {path}": "你的课程工作副本：{path}",
    "  {copied} new files copied from the clone; {kept} already there kept as you left them":
        "  从克隆复制了 {copied} 个新文件；已有的 {kept} 个保持你离开时的样子",
    "  {copied} files copied from the clone; run and save freely: git sees none of it":
        "  从克隆复制了 {copied} 个文件；尽管运行、保存，git 一概看不到",
    "  {kept} files, all kept as you left them (to get a stored chapter back, delete your copy and start again)":
        "  {kept} 个文件，都保持你离开时的样子（想要回仓库里的原版某章，删掉你的副本再启动一次）",
    "  JupyterLab's news pop-up: off ({path})": "  JupyterLab 的新闻弹窗：已关闭（{path}）",
    "  JupyterLab's news pop-up stays on: cannot write the environment's settings ({error})":
        "  JupyterLab 的新闻弹窗仍会出现：无法写入环境的设置（{error}）",
    "  opening {chapter}; the URL JupyterLab prints opens it too": "  打开 {chapter}；JupyterLab 打印的 URL 也直接打开它",
}
