"""第 7 章「队长的三项检查」与练习 7 的中文（tools/build_notebooks/ch07.py 的 markdown 单元）。

每项：单元 id -> (所译英文原文的 sha1 前 12 位, 中文)。见 tools/build_notebooks/zhsource.py。
"""

ZH = {
"ch07-00": ("eca478817249", r"""
# 第 7 章 · 队长的三项检查（调优与排查）

*有没有哪个背包超重？喊话频道堵不堵？仓库有没有拖后腿？*

一切准备就绪：搬家队知道了怎么分摊家当（ZeRO 的各个 stage）、仓库在哪儿（卸载，offload）、箱子怎么装（分桶）。
出发之前，队长沿着队伍走一遍，检查**三件事**：有没有哪个工人的背包超重，喊话频道堵不堵，去仓库取东西会不会拖慢整队。
训练调优也是一样：**先判断瓶颈在显存（device memory）、通信还是计算，再对症下药。** 搬家队的目标不是让每趟搬得最重，
而是让整场搬家用时最短：算、传、等三者平衡。

| 队长检查 | 训练中 | 看什么 | 调什么 |
|---|---|---|---|
| 背包的上限 | 每个 rank 的显存 | `engine.memory()`、显存预算的峰值 | `stage` 从 1 升到 3，然后 `offload_optimizer`，或重计算激活值 |
| 折叠椅 | 为反向传播保留的激活值（activations） | 预算的 `peak_activation_bytes` | `torch.utils.checkpoint` |
| 喊话频道 | 通信 | `engine.ledger`（调用次数、字节数）、`engine.timeline` | `reduce_bucket_size`、batch size、梯度累积步数 |
| 等最慢的人 | 步调不一致的 rank | 每个 rank 的时间线 | 拖后腿的那个 rank（straggler） |
| 仓库 | 主机端的优化器更新和数据拷贝 | 时间线上的 host 条 | 只在显存不够时才卸载 |

业内常给的调优套路，本章把它当实验跑一遍：*显存不够时，把 `zero_optimization.stage` 从 1 逐级升到 3；仍然不够，就打开
`offload_optimizer` 或激活重计算（activation recomputation）。吞吐（throughput）下降时，先查通信桶大小和带宽，再调整 batch size 和梯度累积（gradient accumulation）步数。* 一步的时间大致由三部分组成，

$$T_{\text{step}} \approx T_{\text{compute}} + T_{\text{communication}} + T_{\text{waiting}},$$

而且*如果升到更高的 ZeRO stage 后吞吐反而下降，先怀疑通信*，而不是盲目加卡。在 GPU 集群上，你会用 `nvidia-smi` 看显存峰值，
用 `ds_report` 查版本，在日志里看吞吐和延迟；这里由引擎在真实的 rank 上逐项测量。
"""),
"ch07-02": ("ddc78fb44e5f", r"""
## 1. 第一项检查：背包的上限

每个 rank 的设备有 1.5 MB（1,500,000 字节）的**显存预算**：`zerolab.initialize(..., device_budget="1.5MB")`
统计引擎放到设备上的一切（模型状态、引擎的缓冲区、autograd 保留的激活值），一旦统计值要超过预算，就抛出
`DeviceOutOfMemoryError`（一个 `torch.OutOfMemoryError`，见第 5 章）。为了看清每种配置需要多少，我们先在宽松的预算下把它们各跑一遍，读出峰值。

混合精度加 Adam 时每个 rank 的模型状态（每个参数：参数 2 字节、梯度 2 字节、优化器状态 12 字节；见第 1、3 章），记 n = Ψ/N：

| 配置 | 参数 | 梯度 | 优化器状态 | 合计 |
|---|---|---|---|---|
| stage 0 | 2Ψ | 2Ψ | 12Ψ | 16Ψ |
| stage 1 | 2Ψ | 2Ψ | 12n | 4Ψ + 12n |
| stage 2 | 2Ψ | 2n | 12n | 2Ψ + 14n |
| stage 3 | 2n | 2n | 12n | 16n |
| stage 1 + offload_optimizer | 2Ψ | 2Ψ | （主机） | 4Ψ |
| stage 2 + offload_optimizer | 2Ψ | （主机） | （主机） | 2Ψ |
| stage 3 + offload_optimizer | 2n | （主机） | （主机） | 2n |
| stage 3 + 两种卸载 | （主机） | （主机） | （主机） | 0 |

**先预测，再运行。** Ψ ≈ 150,000，N = 2：stage 0 的模型状态约需 2.4 MB。模型状态能装进 1.5 MB 的第一个 stage 是哪个？
再加上一个 8 条样本的微批次（micro-batch）产生的激活值，还装得下吗？
"""),
"ch07-05": ("1b2ad22e698c", r"""
实测的模型状态落在公式上，只多出几个字节：TinyLM 冻结的 `temperature`（每个 rank 2 字节：stage 0-2 是完整的参数；stage 3 是一个分片，
因为 stage 3 像对待其他参数一样把它分区，与 DeepSpeed 的 `zero.Init` 相同，它的 1 个元素补齐到 2 个）和 Adam 的步数计数器
（每个 4 字节：stage 0-2 只有一个，因为可训练参数组成一块扁平缓冲区；stage 3 每个模块一个，各模块的分片还会补齐以便均分）。
把 stage 从 0 升到 3，模型状态从 16Ψ 降到 16Ψ/N，但 N = 2 时即便 stage 3 也要留 8Ψ；而峰值还要加上公式没算的两样：
**缓冲区**（stage 2 的梯度桶，stage 3 收集来的层及其梯度）和**激活值**。在这里，峰值 = 模型状态 + 缓冲区 + 激活值，分毫不差：
引擎一直把激活值算到反向传播结束。

于是轮到套路的第二步。腾出空间有两种办法，代价不同：

- **卸载优化器**（第 5 章）：厚厚的小本子送进仓库。连 stage 1 都能轻松装下；代价是每一步都要付出数据拷贝和一次 CPU 上的 Adam。
- **重计算激活值**（折叠椅）：前向时把椅子折起来，反向需要时再打开。这样不用卸载就能守住 stage 2 或 3，代价是前向的一部分要算两遍。

## 2. 折叠椅：重计算省下什么、花掉什么

`torch.utils.checkpoint` 在运行一个块的前向时不保留中间张量，只保留它的输入；反向传播到达这个块时，再把它的前向跑一遍来重建这些张量。
激活值从“每个块的每个中间结果”降到“每个块一个输入”。

**先预测，再运行。** 前向要 F 次浮点运算，反向大约 2F（对输入求一次梯度，对权重求一次），合计 3F。
四个块都做重计算时，一个训练步要花多少个 F？考虑到嵌入层、最后的 LayerNorm 和 宽 257 的输出头都不重计算，会比 4F 多还是少？
"""),
"ch07-08": ("4a3ae86f31d8", r"""
FLOPs 是精确的（由张量形状算出，每台机器都一样）；表示时间的点每次运行都会变，而且在两颗共享的 CPU 核上，一步里很大一部分根本不是算术
（Python、集合通信），所以它们可能比柱子更靠近 3。在 GPU 上算术占主导，对 transformer 的每一层都做重计算大约多花一次前向：
每个 token 8Ψ 次而不是 6Ψ 次浮点运算，时间多三分之一，换来激活值从每层的每个中间结果缩到每层一个输入。

## 3. 第二项检查：喊话频道，以及等待

一步的时间有三部分，时间线在每个 rank 上把它们分开：

- **计算**：前向、反向、优化器更新（这些时间段减去花在集合通信里的时间）；
- **通信**：集合通信，按字节数所需的时间（第 6 章：n·α + S/β）；
- **等待**：集合通信里剩下的时间。一次集合通信要等所有 rank 都加入才会结束，所以先到的 rank **要等最慢的那个**，而时间线把这段等待记作通信。

**先预测，再运行。** stage 2，两个 rank；rank 1 拖后腿：只在 rank 1 上，每次前向多花 200 ms（一块慢 GPU、同一台机器上别的任务在抢资源、一批更长的序列）。
谁的时间线上会出现这 200 ms？记成什么？
"""),
"ch07-10": ("382cb4311794", r"""
拖后腿的 rank 自己的时间线把延迟记作计算；**准时的那个 rank** 的时间线却把它记作通信，因为它一直卡在第一次集合通信里，等 rank 1 到来。
所以“这个 rank 一步里大部分时间都在通信”，可能是链路慢，也可能是同伴慢：买更快的网络之前，先比较各个 rank 的时间线。
整队的速度取决于最慢的那个工人。

### 箱子、batch 与梯度累积

喊话频道每步传多少，账本里记得清清楚楚。套路里的三个旋钮：`reduce_bucket_size`（第 6 章）改变调用次数，不改变字节数；
更大的微批次，字节数不变，却覆盖更多样本；k 个微批次的梯度累积在 stage 1 每个优化器步只归约一次，在 stage 2 却每个微批次都要归约
（第 6 章：DeepSpeed 对每个桶做 all-reduce，2Ψ，所以加上更新后的 all-gather 共 (2k + 1)Ψ；论文的 reduce-scatter 会是 (k + 1)Ψ）。

**先预测，再运行。** 每个 rank 每个优化器步 16 条序列，做成一个 16 条的微批次，或 4 个 4 条的微批次。stage 1 和 stage 2 每个 rank
每个优化器步各搬多少字节？折合到每条序列呢？
"""),
"ch07-12": ("1f10b032296e", r"""
（DeepSpeed 的默认设置：每个桶 all-reduce，更新后一次 all-gather，3Ψ。扁平缓冲区有 150,464 个元素，能被 2 个 rank 均分，所以 Ψ 那一列恰好是 3 和 9。）

- **桶大小**（20,000 对 200,000 个元素）：调用更少，字节相同；在真实网络上，每省一次调用就省一个 α（第 6 章）。
- **batch size**：每个微批次 4 条或 16 条序列，每步字节数相同（不管 batch 多大，梯度都和模型一样大）：batch 越大，摊到每条序列上的越少。
- **梯度累积**：在 stage 1，4 个 4 条的微批次和一个 16 条的微批次搬的一样多；在 stage 2 却是 9Ψ 对 3Ψ。如果靠梯度累积来凑 batch size，
  stage 1（或者 stage 2 配更少、更大的微批次）能让频道更安静。

## 4. 第三项检查：仓库有没有拖后腿？

打开 `offload_optimizer` 后，优化器更新在主机（host）上运行，要等最后一个梯度下来之后才开始：时间线把它记成步内的 **host** 条（第 5b 章）。
除非有什么能把它藏起来，否则它会直接加到这一步的时间上。

**先预测，再运行。** stage 2，开和不开 `offload_optimizer`：host 条出现在哪里？有什么和它重叠吗？
"""),
"ch07-14": ("ca01e5023291", r"""
主机端的更新要等反向传播结束才开始，直接加在这一步上：这里它很便宜（主机和“设备”是同一颗 CPU）；在 GPU 上，代价是用 CPU 上的 Adam 换下 GPU 上的 Adam，
外加 PCIe 拷贝：第 5b 章模拟了一个 13B 模型，每步一个微批次时，一步约为 stage 3 的三倍，每步计算更多时代价小得多。所以套路才是这个顺序：先升 stage，只有显存确实不够时才去仓库。

## 5. 排查：你会遇到的四种情况

下面每种情况都是真实 rank 上的真实故障，被捕获下来，并附上引擎给出的信息。

### 5a. 显存不足（OOM）

**先预测，再运行。** stage 2，1.5 MB 预算，微批次 8 条（第 1 节测得它的峰值约 2.1 MB）。它会在哪里失败：初始化时、前向中、还是反向中？报错信息建议怎么做？
"""),
"ch07-16": ("7fe85bf4bfd9", r"""
第一步装得下（Adam 的两个矩还不存在）；第二步在前向中失败，因为激活值堆在了完整的模型状态之上，报错信息按从大到小的顺序点出了各个“巨头”。
它列出的“能装下的配置”是用公式加上到目前为止的实测值（到失败为止的激活值）算出来的，改动最小的排在最前；把它当作起点，再用一次运行来确认：
第 1 节做的正是这样的运行。在 GPU 上，同样的 `torch.OutOfMemoryError` 来自 CUDA 的内存分配器；峰值用 `torch.cuda.max_memory_allocated()`（或 `nvidia-smi`）查看。

### 5b. 各 rank 走了不同的路径

每个 rank 必须按同样的顺序执行同样的集合通信。前向随 rank 而变的模型（某个 rank 上跳过一层，或按各 rank 各不相同的数据走分支）会破坏这一点。
在 stage 3，跳过一个块的 rank 去收集下一个块的参数，而其他 rank 收集的是被跳过那块的参数，集合通信就对不上了。在 NCCL 上，大小不同的收集会一直**卡住**直到超时；
大小相同的收集则会错配成对，把错误的参数交给各个 rank，而且**悄无声息**。DeepSpeed 0.19.8 只在一步走完它所记录的轨迹时（即第一步）
比较一次各 rank 的模块顺序（`runtime/zero/partitioned_param_coordinator.py` 第 260 行，`reset_step` 里的一个断言）；
第一步如果卡住，就走不到这里，之后的步也不再比较（它逐次收集的检查 `safe_mode` 默认关闭）。
zerolab 自己多做了一步：先检查每一组收集（一个 16 字节的头，带着各参数组的 id，单独记在 `ledger.checks` 里；
`"zerolab": {"order_checks": false}` 可以关掉它），然后在每个 rank 上抛出错误，而不是卡住。
在 stage 0-2，梯度按与路径无关的桶来归约，所以被跳过的块在那个 rank 上只是没有梯度，归约时按零处理，和 DDP 的 `find_unused_parameters=True` 一样。
在 stage 0，不管 `ignore_unused_parameters` 怎么设，DeepSpeed 都用零填上缺失的梯度（`runtime/engine.py` 第 3857-3863 行）；
在 stage 1-2，这个键的默认值 true 允许这种情况，设为 false 就会报错。键为 false 时，zerolab 在 stage 0-2 都会报错，在 stage 0 比 DeepSpeed 更严。

**先预测，再运行。** rank 1 跳过第 2 个块。stage 3 会怎样？stage 2 且 `ignore_unused_parameters` 为 false 呢？stage 2 用默认设置呢？
"""),
"ch07-18": ("d1641aaafdf2", r"""
不到一秒就报错，每个 rank 都报，并点出相关的模块或参数：不会卡住。修复要在模型里做：让每个 rank 走同样的模块（想在某个 rank 上跳过计算，
就乘以零而不是走分支）；对于有些 rank 确实用不到的参数，在 stage 1-2 保留默认的 `ignore_unused_parameters: true`（在 stage 0，DeepSpeed 从不报这个错）。

### 5c. fp16 的损失缩放崩塌

fp16 的上限是 65,504。动态损失缩放（第 4 章）在溢出后减半并跳过这一步；如果**每一步**都溢出，它会一路减半到 `min_loss_scale`，训练随之停止。
这很少是缩放本身的问题：不管缩放是多少，总有东西会溢出；这里是大约 10⁵ 的输入，一转成 fp16 就变成 inf。

**先预测，再运行。** `initial_scale_power` 为 8（缩放 256），`hysteresis` 为 1：多少步之后训练会停止？换成 bf16 呢？
"""),
"ch07-20": ("fb6fe4b60484", r"""
从 256 到 1 减半八次，跳过八步（所以模型根本没有训练过），然后报错。上面那些 `[rank 0] overflow: ...` 行（中文版内核里是 `[rank 0] 溢出：...`）是 `engine.log`，由 rank 0 实时打印；
在 DeepSpeed 的运行中，同样的行会出现在它的日志里，**日志里满是被跳过的步，就是要找的症状**，远在缩放降到最小值之前就能看到。
报错信息给出的修复：把输入归一化（或找到溢出的那个运算），如果模型发散就降低学习率，或者改用 bf16：它有 fp32 的数值范围，不需要损失缩放。

### 5d. 更高的 stage 反而更慢：通信受限

stage 3 在前向时收集每一层的参数，反向时再收集一次。层多而小、每层计算量少时，调用次数占了主导。

**先预测，再运行。** 一个 24 层、宽 32 的 MLP（Ψ = 25,344），每个 rank 4 条样本，DeepSpeed 默认的 `reduce_bucket_size`
（5·10⁸：整个模型装一个桶）。stage 1 和 stage 3 每步各做多少次集合通信？多少字节？stage 3 会慢多少？
（这里关掉了 5b 节讲的 zerolab 顺序检查，即 `"zerolab": {"order_checks": false}`。这样引擎只发 DeepSpeed 也会发的集合通信，时间才能放在一起比。）
"""),
"ch07-22": ("d54a81f2065d", r"""
stage 3 搬的字节数和 DeepSpeed 的 stage 1 差不多（各 3Ψ：stage 1 对梯度做 all-reduce、对参数做一次 all-gather；stage 3 在前向收集每一层、
反向再收集一次，并对梯度做 reduce-scatter），但伤人的是调用次数：每层每步 2 次 all-gather，而 stage 1 是整个模型一次；
梯度则每个 `reduce_bucket_size` 桶一次 reduce-scatter（这里只有一个：DeepSpeed 把模块装满一个桶，一次调用做完 reduce-scatter）。
每次调用都要付延迟 α，而 24 个小层没有任何东西能把 α 藏起来。（两者都还多一次 2 个元素的 all-reduce：zerolab 把溢出检查和梯度范数合进一次调用；
DeepSpeed 只发梯度范数，见第 10 章。这里的时间是在关掉 zerolab 顺序检查后测的，和 DeepSpeed 的运行方式相同。
如果打开，stage 3 每次收集还要多发一个 16 字节的头，这一步会更慢。）
`benchmarks/results/side_by_side.txt` 里有在 DeepSpeed 0.19.8 本身上测得的同样计数。这就是套路里那句警告：
*如果更高的 stage 让吞吐下降，先怀疑通信*。对策：停在能装下的最低 stage（这里 stage 1 轻松装下），调大
`stage3_param_persistence_threshold` 让小层保持完整（第 3 章），在真实硬件上用预取（prefetch）和更大的桶，或者让每次调用多干点活（更大的微批次）。

## 本章测得的
"""),
"ch07-24": ("096652485dec", r"""
- **先找瓶颈。** 显存：引擎的峰值对比预算。通信：账本里的调用次数和字节数，时间线上花在集合通信里的时间。等待：每个 rank 的同一条时间线。仓库：host 条。
- **显存不够？** 先升 stage（模型状态从 16Ψ 降到 16Ψ/N），再重计算激活值（这里缩到约七分之一，FLOPs 多约 15 %；transformer 上多三分之一），
  或者卸载优化器（每一步都用拷贝和一次主机端更新来付账）。
- **峰值 = 模型状态 + 缓冲区 + 激活值**，缓冲区（桶、收集来的层）随 stage 的机制而增长：只看公式会少算。
- **吞吐不够？** 更少、更大的调用（分桶）；每个字节服务更多样本（更大的微批次）；梯度累积在 stage 1 是免费的，在 stage 2 每个微批次要付 2Ψ（DeepSpeed 的 all-reduce）。
- **花在集合通信里的时间 = 通信 + 等待**：拖后腿的 rank 会显示在*其他* rank 上。
- **现在你能看懂的四种故障：** 预算（或 CUDA）的显存不足信息；路径分歧变成报错而不是卡住；fp16 崩塌之前满是跳步的日志；
  因为调用多得多而更慢的高 stage。

## 思考题

1. 在第 1 节把微批次设为 2（`peaks` 里的 `config(..., micro=2)`）。先预测：现在哪些配置装得进 1.5 MB？重计算还值得它花的 FLOPs 吗？
2. 在第 3 节只让 rank 1 的*反向*变慢（用 `register_full_backward_hook`）。rank 0 还会等吗？在哪一次集合通信里等？
3. 第 3 节的表显示 4 个微批次时 stage 2 搬 9Ψ。从多少个微批次开始，stage 2 搬的至少是 stage 1 的两倍？修改 `KNOBS` 验证一下。
4. 在 5d 里把 `stage3_param_persistence_threshold` 设为 2,000（每层 1,056 个参数，都保持完整）。先预测 stage 3 每步的集合通信，再运行。
5. 同事的 fp16 训练每几百步在日志里出现一次 “overflow: skipping step”，损失在下降。这算崩塌吗？担心之前，你会在 `engine.log` 里找什么？

**轮到你了：** 在 [`exercises/zh/07_captains_pick.ipynb`](../../exercises/zh/07_captains_pick.ipynb) 里，你来写队长的选择：
由 Ψ、N、精度以及实测的激活值和缓冲区，算出每种配置的设备字节数，并选出规则中第一个装得进预算的配置。
检查程序会在真实引擎里、在该预算下运行你的选择，并把每个更便宜的配置也跑一遍，确认它们都装不下。
"""),
"ex07-00": ("fdcae260596d", r"""
# 练习 7 · 队长的选择：装得下、又最快的配置

*目标不是最轻的背包，而是最短的搬家时间。*

给定一个模型、它的 rank 数和显存预算（memory budget），队长要挑一个 ZeRO 配置。挑最省显存的配置（stage 3 加上全部卸载）总能装下，但通常也最慢。
所以：**选队长规则中第一个装得下的配置。** 规则从最便宜的开始：

1. 不卸载的 `stage` 0、1、2、3；
2. 然后是 stage 1、2、3 加 `offload_optimizer`（cpu）；
3. 然后是 stage 3 加 `offload_optimizer` 和 `offload_param`。

为什么是这个顺序？根据第 3、6、7 章测得的结果（字节数和调用次数，而不是计时）：每步一个微批次时，stage 0 用一次 all-reduce 往线路上放 2Ψ；
stage 1 和 2 放 3Ψ（DeepSpeed 对它们的梯度桶做 all-reduce，再对更新后的参数做 all-gather），调用更多；stage 3 也搬 3Ψ，但每层要调用好几次
（第 7 章 5d）。不管哪个 stage，每种卸载都要在每一步把梯度经 PCIe 链路送下去、把参数送上来，并在 CPU 上跑 Adam；连参数也卸载的话，
每个收集来的层都要从主机搬上来，每步两次。所以任何不卸载的配置都排在任何卸载的配置前面；卸载方式相同时，stage 低的排在前面。

你要写两个函数。

    device_bytes(facts, stage, offload_optimizer, offload_param) -> bytes

一个 rank 的设备上的峰值：**模型状态 + 缓冲区 + 激活值**（第 7 章第 1 节）。记 p = `facts.param_bytes`（fp16/bf16 为 2，fp32 为 4），
k = `facts.optimizer_bytes`（混合精度为 12：fp32 主权重 + 两个矩；fp32 为 8：两个矩），Ψ = `facts.psi`，n = Ψ/N：

- 参数：stage 0-2 为 pΨ，stage 3 为 pn；开 `offload_param` 时设备上没有；
- 梯度：stage 0-1 为 pΨ，stage 2-3 为 pn；开 `offload_optimizer` 时，stage 2-3 的梯度分片一产生就送往主机，但 **stage 1 仍在设备上保留完整梯度**
  （它在反向传播结束时才归约）；
- 优化器状态：stage 0 为 kΨ，从 stage 1 起为 kn；开 `offload_optimizer` 时设备上没有；
- 缓冲区：`facts.buffer_bytes[stage]`（实测：stage 2 的桶，stage 3 收集来的层）；
- 激活值：`facts.activation_bytes`（实测）。

    choose_config(facts, budget) -> 一个 DeepSpeed 的 zero_optimization 块，或 None

规则中第一个 `device_bytes` 不超过 `budget` 的配置，写成字典，例如 `{"stage": 2}` 或 `{"stage": 3, "offload_optimizer": {"device": "cpu"}}`；
都装不下就返回 `None`。

**检查不通过时**，它会用几行话说明哪里错了、期望的是什么，再给一条点出可能错误的提示（hint）。想看完整的回溯，
运行 `import zerolab.checks; zerolab.checks.full_tracebacks()`，再运行一次检查单元。
"""),
"ex07-03": ("8d1959d5bf5a", r"""
在本章的模型上试一试。`measure_facts` 在 2 个 rank 上用每种配置训练练习用的 TinyLM（fp16，微批次 2），返回 facts 以及每种配置实测的每 rank 峰值。
运行单元之前，先**预测**你在每个预算下的选择，然后把你的 `device_bytes` 和引擎测得的峰值对比一下。
"""),
"ex07-05": ("7948a0c9a4c6", r"""
**检查。** 先在四组设置（Ψ 最大到 7·10⁹，N = 2、3、4、8，fp16、bf16 和 fp32）下，把每种配置的 `device_bytes` 和公式对比；
再在略高于每种配置需求的预算、以及低于所有配置的一个预算下，把 `choose_config` 和规则对比。然后在引擎里：分别为 2 个 rank 上的 fp16 TinyLM
和 3 个 rank 上的 fp32 TinyLM 实测 facts；在十一个预算中的每一个下，你的选择要在 `device_budget` 下训练两步且不能显存不足，
而规则中排在它前面的每个配置都必须需要比预算更多的显存（峰值由引擎实测）。
"""),
"ex07-07": ("61ae2b0a9ec8", r"""
## 它在 zerolab 里的位置

`zerolab.budget.Budget` 在引擎训练时统计的正是这三部分（显存不足信息里的 `configs_that_fit` 就是你的 `device_bytes`，激活值取到当时为止的实测值）；
`engine.memory()` 给出模型状态和缓冲区；`zerolab.simulate` 为整个集群做同样的算术，transformer 的激活值用公式估算。

思考题：

1. N = 2 时，stage 1 加 `offload_optimizer`（4Ψ）比不卸载的 stage 3（8Ψ）需要的更少。N 多大时 stage 3 需要的更少？那时规则还会把 stage 3 排在前面吗？为什么？
2. 规则先试 stage 0，再试 stage 1，尽管 stage 1 更省显存。stage 1 每步多发了什么 stage 0 不发的东西（看账本里的调用）？什么时候你还是会选 stage 1？
3. 激活重计算在规则里应该排在哪儿？`device_bytes` 需要知道什么才能给它定位？
"""),
}
