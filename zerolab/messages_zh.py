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

# -- zerolab.checks: what every exercise check shows ---------------------------------------------------
ZH["checks"] = {
    "PASSED: {message}": "PASSED（通过）：{message}",
    "{what} failed on the ranks: {first}\n  hint: {hint}": "{what}在各 rank 上失败：{first}\n  提示：{hint}",
    "  ... ({n} more lines)": "  ……（还有 {n} 行）",
    "(the full traceback: run zerolab.checks.full_tracebacks(), then this cell again)":
        "（完整的回溯：运行 zerolab.checks.full_tracebacks()，再运行一次这个单元）",
    "(the full traceback and the rank's traceback: run zerolab.checks.full_tracebacks(), then this cell again)":
        "（完整的回溯以及该 rank 的回溯：运行 zerolab.checks.full_tracebacks()，再运行一次这个单元）",
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
    # the giants (zerolab.checks.ch01.NAMES)
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
        "model_state_bytes_per_rank 还没有写（它抛出了 NotImplementedError：{error}）。先把上面的单元补完并运行，"
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
        "  （stage 0 是对的；各个 stage 把巨头分给各 rank：1 分优化器状态，2 再加上梯度，3 再加上参数）",
    "TinyLM, Ψ = {psi:,} trainable parameters, {n} ranks, Adam; bytes per rank (measured on rank 0 / yours)":
        "TinyLM，Ψ = {psi:,} 个可训练参数，{n} 个 rank，Adam；每个 rank 的字节数（rank 0 实测 / 你的）",
    "your byte count matches the engine's backpacks in {n} configurations on {world} ranks,\n"
    "  and the ZeRO paper's Figure 1 (120 / 31.4 / 16.6 / 1.9 GB)":
        "你算的字节数在 {world} 个 rank 上的 {n} 种配置里都与引擎的背包相符，\n"
        "  也与 ZeRO 论文的图 1 一致（120 / 31.4 / 16.6 / 1.9 GB）",
}

# -- exercise 6: the bucket plan -----------------------------------------------------------------------
ZH["checks.ch06"] = {
    "hint: ": "提示：",
    # the cases (zerolab.checks.ch06.CASES)
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
        "出现了空桶：遇到比一个桶还大的参数时，只有当前桶里已经有东西才需要封桶（if current and size + n > bucket_numel）",
    "parameter(s) {missing} are in no bucket (did the last bucket get appended after the loop?)":
        "参数 {missing} 不在任何桶里（循环结束后，最后一个桶加进去了吗？）",
    "a parameter is in two buckets (or an index out of range): each index exactly once":
        "有参数出现在两个桶里（或下标越界）：每个下标必须恰好出现一次",
    "wrong order: keep the parameters in the order given (the gradient order): do not sort, reverse or regroup them":
        "顺序错了：保持参数给定的顺序（梯度顺序）：不要排序、反转或重新分组",
    "bucket {bucket} holds {total} elements > bucket_numel {limit}: close the bucket before adding a parameter "
    "that would overflow it; a parameter larger than a bucket goes alone":
        "桶 {bucket} 装了 {total} 个元素 > bucket_numel {limit}：在加入会让它溢出的参数之前先封桶；比一个桶还大的参数单独一桶",
    "off by one at the boundary: bucket {bucket} ({total}) could still take parameter {index} ({size}), filling it "
    "to exactly {limit}; close only when size + n > bucket_numel (not >=)":
        "边界上差了一个：桶 {bucket}（{total}）还能装下参数 {index}（{size}），正好装到 {limit}；只有 size + n > bucket_numel "
        "时才封桶（不是 >=）",
    "bucket {bucket} ({total} elements) was closed although parameter {index} ({size}) still fits: close a bucket "
    "only when the next parameter would overflow it":
        "桶 {bucket}（{total} 个元素）被封上了，但参数 {index}（{size}）其实还装得下：只有下一个参数会让桶溢出时才封桶",
    "compare your buckets with the expected ones above": "把你的桶和上面期望的桶逐一比较",
    "the engine on {n} ranks (inside your bucket_params)": "{n} 个 rank 上的引擎（在你的 bucket_params 里）",
    "bucket_params raised on a rank; zerolab.checks.full_tracebacks(), then run again, shows the line":
        "bucket_params 在某个 rank 上抛出了异常；运行 zerolab.checks.full_tracebacks() 后再运行一次，就能看到是哪一行",
    "the engine, stage {stage}, reduce_bucket_size {limit}, rank {rank}":
        "引擎，stage {stage}，reduce_bucket_size {limit}，rank {rank}",
    "{where}: the collectives differ from zerolab's\n  expected: {want}\n  yours:    {got}\n"
    "  hint: the engine sends one collective per bucket you return":
        "{where}：集合通信与 zerolab 的不同\n  期望：{want}\n  你的：{got}\n  提示：你返回的每个桶，引擎都发一次集合通信",
    "{where}: the trained weights differ from zerolab's although the collectives matched":
        "{where}：集合通信一致，但训练出的权重与 zerolab 的不同",
    "alone: {n} parameter lists, every bucket as zerolab cuts it": "单独检查：{n} 组参数，每个桶都和 zerolab 切得一样",
    "engine: MLP{sizes} on {n} ranks, {steps} steps, your buckets inside zerolab":
        "引擎：MLP{sizes}，{n} 个 rank，{steps} 步，zerolab 里用的是你的分桶",
    "  stage {stage}, reduce_bucket_size {limit}: {calls} collectives ({ops}), {bytes:,} bytes;":
        "  stage {stage}，reduce_bucket_size {limit}：{calls} 次集合通信（{ops}），{bytes:,} 字节；",
    "    gradient buckets per step (elements): {sizes}": "    每步的梯度桶（元素数）：{sizes}",
    "  calls, elements, bytes and trained weights: the same as with zerolab's rule":
        "  调用次数、元素数、字节数和训练出的权重：都与 zerolab 的规则相同",
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
        "峰值时激活值（facts.activation_bytes）在设备上：把它加一次",
    "the buffers of stage {stage} (facts.buffer_bytes[{stage}]) come on top of the model states: add them (they "
    "stay with offload)":
        "stage {stage} 的缓冲区（facts.buffer_bytes[{stage}]）要加在模型状态之上（卸载时它们也留在设备上）",
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
        "多算或少算了一个分片（p Psi / N）：stage 2-3 开 offload_optimizer 时梯度分片也去了主机；offload_param 会把 stage 3 的参数分片移走",
    "the optimizer shard (k Psi / N): offload_optimizer takes all of it to the host":
        "优化器分片（k Psi / N）：offload_optimizer 把它全部移到主机",
    "the optimizer states (k Psi): offload_optimizer takes them all to the host":
        "优化器状态（k Psi）：offload_optimizer 把它们全部移到主机",
    "fp32 training keeps no separate master copy: its optimizer states are Adam's two moments, 8 bytes per "
    "parameter, not mixed precision's 12 (master + moments); otherwise look for a copy of parameters or "
    "gradients too many or too few":
        "fp32 训练没有单独的主权重：它的优化器状态是 Adam 的两个动量，每个参数 8 字节，而不是混合精度的 12 字节"
        "（主权重 + 动量）；否则就检查是不是多算或少算了一份参数或梯度",
    "compare term by term: {precision} keeps {p} bytes per parameter and per gradient and {k} of optimizer state "
    "(facts.param_bytes, facts.optimizer_bytes)":
        "逐项比较：{precision} 每个参数、每个梯度各 {p} 字节，优化器状态 {k} 字节（facts.param_bytes、facts.optimizer_bytes）",
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
        "{config} 也装得下（峰值 {peak:,} 字节），而且在队长的规则里排在前面：它每步搬得更少",
    "{where}:\n  expected: {want}\n  yours:    {got}\n": "{where}：\n  期望：{want}\n  你的：{got}\n",
    "device_bytes: {n} configs at {settings} settings (Psi up to 7e9, N = 2, 3, 4, 8,\n  fp16, bf16, fp32), as the "
    "formula":
        "device_bytes：{settings} 组设置下的 {n} 个配置（Psi 最大到 7e9，N = 2、3、4、8，\n  fp16、bf16、fp32），与公式一致",
    "choose_config: {n} budgets, each config's need exactly (it fits: at most the budget),\n  just under another, "
    "and one below all: the rule's pick":
        "choose_config：{n} 个预算（恰好等于某个配置的需求：装得下；\n  略低于另一个配置；以及低于所有配置），都与规则的选择一致",
    "engine: TinyLM, {steps} steps per run, facts measured on the ranks": "引擎：TinyLM，每次运行 {steps} 步，facts 在各 rank 上实测",
    "; {n} earlier config(s) over the budget": "；前面 {n} 个配置超出预算",
    "  N = {n}, {precision}, budget {budget:>9,}: None: every config over it":
        "  N = {n}，{precision}，预算 {budget:>9,}：None：每个配置都超出预算",
    "your device_bytes and choose_config pick, for every budget, the config that trains\n"
    "  under it in the real engine and no config earlier in the captain's rule fits":
        "对每个预算，你的 device_bytes 和 choose_config 选出的配置都能在真实引擎里、在该预算下训练，\n"
        "  而队长规则中排在它前面的配置都装不下",
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
        "{name} 还没写（它抛出了 NotImplementedError：{error}）。填好上面的单元并运行，然后再运行一次这个检查。",
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
        "逐项比较；离开每个节点的（N = {n}，{m} 个节点，每节点 {k} 个）：{parts}",
    "per step: compute 6 Psi T / (mfu x peak); PCIe: the bytes of this GPU's shard (Psi/N elements) that cross "
    "it, over pcie_Bps; set them equal and solve for T":
        "每步：计算 6 Psi T / (mfu x peak)；PCIe：这张 GPU 的分片（Psi/N 个元素）经过它的字节数除以 pcie_Bps；令两者相等，解出 T",
    "  {peak:>4.0f} TFLOP/s x {mfu:.2f}, {beta:>4.0f} GB/s, N = {n:>4}{ck:<15}: {tokens:>8,.0f} tokens per GPU":
        "  {peak:>4.0f} TFLOP/s x {mfu:.2f}，{beta:>4.0f} GB/s，N = {n:>4}{ck:<10}：每张 GPU {tokens:>8,.0f} 个 token",
    "  {psi:>3.0f}B parameters, N = {n:>4} in nodes of {k}, {on:<11}: {g:>5.3f} Psi leave each node":
        "  {psi:>3.0f}B 参数，N = {n:>4}，每节点 {k} 个，{on:<11}：每个节点离开 {g:>5.3f} Psi",
    "  {peak:>4.0f} TFLOP/s x {mfu:.2f}, PCIe {pcie:.0f} GB/s, N = {n:>2}, offload {what:<18}: {tokens:>6,.0f} "
    "tokens per GPU":
        "  {peak:>4.0f} TFLOP/s x {mfu:.2f}，PCIe {pcie:.0f} GB/s，N = {n:>2}，卸载 {what:<18}：每张 GPU {tokens:>6,.0f} 个 token",
    "tokens_to_hide equals zerolab.simulate's hide_tokens at {n} settings (within 1 %)":
        "tokens_to_hide 在 {n} 组设置下与 zerolab.simulate 的 hide_tokens 一致（误差 1 % 以内）",
    "inter_node_bytes equals zerolab.simulate's inter-node bytes at {n} settings (within 1 %)":
        "inter_node_bytes 在 {n} 组设置下与 zerolab.simulate 的跨节点字节一致（误差 1 % 以内）",
    "offload_hide_tokens equals zerolab.simulate's hide_tokens at {n} settings (within 1 %)":
        "offload_hide_tokens 在 {n} 组设置下与 zerolab.simulate 的 hide_tokens 一致（误差 1 % 以内）",
    # the mistakes a learner is likely to make (TOKENS_MISTAKES, BYTES_MISTAKES, OFFLOAD_MISTAKES)
    "each rank sends (N-1)/N of every tensor it gathers or reduce-scatters (the ring): multiply by (N-1)/N":
        "每个 rank 对它收集或 reduce-scatter 的每个张量只发出 (N-1)/N（环形算法）：乘上 (N-1)/N",
    "stage 3 moves the parameters twice (a gather in forward, again in backward) and reduce-scatters the "
    "gradients: 3 x 2 Psi bytes, not stage 2's 2 x 2 Psi":
        "stage 3 把参数搬两次（前向收集一次，反向再一次），再对梯度做 reduce-scatter：3 x 2 Psi 字节，而不是 stage 2 的 2 x 2 Psi",
    "stage 3 moves three tensors of Psi elements per micro-step (two gathers, one reduce-scatter), not one":
        "stage 3 每个微步搬三个 Psi 元素的张量（两次收集、一次 reduce-scatter），而不是一个",
    "bf16/fp16 on the wire: 2 bytes per element, not 4": "线路上是 bf16/fp16：每个元素 2 字节，不是 4",
    "bf16/fp16 on the wire: 2 bytes per element, not 1": "线路上是 bf16/fp16：每个元素 2 字节，不是 1",
    "the GPU computes at mfu x peak_flops, not at its peak": "GPU 的算力是 mfu x peak_flops，不是峰值",
    "with activation checkpointing the forward runs twice: 8 Psi FLOPs per token, not 6":
        "开激活检查点时前向要跑两遍：每个 token 8 Psi 次浮点运算，不是 6",
    "2 Psi FLOPs per token is the forward alone; training (forward + backward) is 6 Psi (8 with checkpointing)":
        "每个 token 2 Psi 次浮点运算只是前向；训练（前向 + 反向）是 6 Psi（开检查点时是 8）",
    "a ring gather or reduce-scatter over N ranks sends (N-1)/N of the tensor out of each node, not all of it "
    "(the node's own share stays home)":
        "N 个 rank 上的环形收集或 reduce-scatter 从每个节点发出张量的 (N-1)/N，而不是全部（节点自己那份留在家里）",
    "qgZ's step between nodes sends (m-1)/m of the node's 4-bit gradients (m = N/k nodes): the node's own share "
    "stays home":
        "qgZ 在节点之间的那一步发出节点 4 bit 梯度的 (m-1)/m（m = N/k 个节点）：节点自己那份留在家里",
    "with hpZ the backward gather runs inside the node (the secondary partition): no parameter bytes leave the "
    "node in backward":
        "用 hpZ 时反向收集在节点内进行（二级分区）：反向时没有参数字节离开节点",
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
    "offload_optimizer moves each step the fp16 gradients down AND the updated fp16 parameters up: 2 + 2 bytes "
    "per element of the shard":
        "offload_optimizer 每步把 fp16 梯度送下去，并且把更新后的 fp16 参数送上来：分片的每个元素 2 + 2 字节",
    "with offload_param the shard comes up from the host twice per micro-step: for the forward gather and again "
    "for the backward one":
        "开 offload_param 时，分片每个微步要从主机搬上来两次：前向收集一次，反向收集再一次",
    "what crosses PCIe is 2-byte (fp16/bf16) gradients and parameters, not fp32":
        "经过 PCIe 的是 2 字节（fp16/bf16）的梯度和参数，不是 fp32",
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
    # figures (zerolab.viz.figure_text: English where no CJK font is installed)
    "GB per GPU": "每张 GPU 的 GB",
    "{model} on {gpus} GPUs: what each GPU must hold": "{gpus} 张 GPU 上的 {model}：每张 GPU 必须装下的",
    "seconds per step (simulated)": "每步秒数（模拟）",
    "elements ({n} flat groups)": "元素（{n} 个扁平组）",
    "ms since the step began (rank 0)": "这一步开始后的毫秒数（rank 0）",
    "ms since the step began": "这一步开始后的毫秒数",
    "bytes held (engine.memory())": "持有的字节（engine.memory()）",
    "what each rank holds over the step: model states + buffers in flight": "每个 rank 在这一步中持有的：模型状态 + 在路上的缓冲区",
    "bytes": "字节",
    "held right after this collective": "这次集合通信刚结束时持有的",
    "bytes (engine.memory(where))": "字节（engine.memory(where)）",
    "what each rank holds where, after the step": "这一步之后，每个 rank 在各处持有的",
    "ms in the recorded step (measured; machine-dependent)": "记录的这一步中的毫秒数（实测；因机器而异）",
    "the step's time: training thread, and I/O threads below": "这一步的时间：训练线程，下方是 I/O 线程",
}
