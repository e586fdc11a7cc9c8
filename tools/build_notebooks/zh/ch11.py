"""「面试题」一章的中文（tools/build_notebooks/ch11.py 的 markdown 单元格：notebooks/11_interview_questions.ipynb）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。英文改动后哈希对不上，
tests/test_zh_edition.py 会点名该单元格；改好中文后运行
``python tools/build_notebooks/zh_edition.py --accept <单元格 id>``。见 tools/build_notebooks/zhsource.py。
"""

ANSWER = "<details><summary><b>参考答案</b>（先写好你自己的答案、跑完验证，再打开）</summary>"

ZH = {
"ch11-00": ("ad7c96b9df36", r"""
# 面试题：ZeRO、FSDP、混合精度与卸载

工程师面试时，只要谈到用 DeepSpeed ZeRO 或 PyTorch FSDP 训练大模型，下面这十五道题就常被问到。每道题分三部分：

1. **题目**，附一句提示：先大声说出你的答案，或者写在纸上，再往下读。答案能测量的，提示会写**先预测，再运行**：把你的数字写下来；
2. **验证**：一个代码单元格，用 `zerolab` 在真实的 rank 上（这台 CPU 上走 gloo），或者用 DeepSpeed 的显存估算器，
   把这个说法跑一遍，并把测量值和公式并排打印出来；
3. **简短的答案**，也就是你在面试现场会给出的那个回答，折叠在*参考答案*下面：写好你自己的答案、跑完验证之后再打开。

记号沿用 ZeRO 论文：**Ψ** 是参数个数（元素个数），**N** 是数据并行的 rank 数。字节和元素总会写明；
GB = 10⁹ 字节，GiB = 2³⁰ 字节。通信量按环形算法下一个 rank 发出的字节数计（即 nccl-tests 的*总线带宽*
（bus bandwidth）口径）：S 字节的 all-reduce 让每个 rank 付出 2(N−1)/N·S，reduce-scatter 或 all-gather 付出 (N−1)/N·S。
论文里的“2Ψ”和“3Ψ”省略了 (N−1)/N 这个因子。

关于 DeepSpeed 的事实都以它的 0.19.8 版为准；zerolab 对每种配置发出的都是 DeepSpeed 的集合通信，
ZeRO 论文与之不同的地方（stage 1-2 在 DeepSpeed 里搬 3Ψ，在论文里搬 2Ψ）两者都测，并分别标明。
题目沿着第 0 到 9 章展开，每个答案都在对应的章节里详细拆解过（见最后一列）。

| # | 题目 | 验证方式 | 章 |
|---|---|---|---|
| 1 | 为什么每个参数 16 字节？ | 4 个 rank 上的 `engine.memory()` | 01 |
| 2 | 每个 stage 下每个 rank 要多少显存？ | 4 个 rank 上的 4 个 stage | 03 |
| 3 | 每个 stage 的通信量：DeepSpeed 的和论文的；为什么是 3Ψ？ | 账本 | 03, 08 |
| 4 | reduce-scatter 还是 all-reduce？ | 集合通信 + 引擎 | 00, 02, 06 |
| 5 | stage 2 遇上梯度累积？ | 4 个微步（micro-step）的账本 | 03, 06 |
| 6 | FSDP 对各个 stage 的叫法？ | 每步的收集次数 | 03 |
| 7 | ZeRO 会改变训练结果吗？ | 与单进程逐一对比 | 03, 03a |
| 8 | 分片之后怎么做梯度裁剪？ | `engine.last_grad_norm` | 04 |
| 9 | 为什么要 fp32 主权重？ | bf16 算术 + 引擎 | 04 |
| 10 | 为什么 fp16 要损失缩放而 bf16 不要？ | 类型转换 + 引擎的缩放系数 | 04 |
| 11 | 动态损失缩放器（dynamic loss scaler）怎么变化？ | 注入一次溢出 | 04 |
| 12 | 激活检查点还是 ZeRO？ | 保存的张量 + stage 3 | 01, 07 |
| 13 | ZeRO-Offload 和 ZeRO-Infinity？ | `engine.memory("host")` + DeepSpeed 的估算器 | 05, 09 |
| 14 | 7B / 70B 的模型装得下吗？ | 公式 + 估算器 | 07 |
| 15 | 什么是 α-β 模型？ | 在 2 个 rank 上拟合 | 06 |
"""),
"ch11-02": ("91a9976e4250", r"""
## Q1. 用 Adam 做混合精度训练，为什么每个参数要 16 字节？

**先预测，再运行。** 列出训练过程中一个参数的所有副本及其数据类型，再把字节数加起来。`engine.memory()` 在 bf16 下每个参数显示多少？fp32 下呢？

""" + ANSWER + r"""

每个参数五个数：前向用的 fp16/bf16 **权重**（2 字节），它的 fp16/bf16 **梯度**（2），以及优化器状态，
即一份 fp32 的**主权重**（4）、Adam 的**动量**（4）和**方差**（4）。2 + 2 + 12 = 16。12 字节的优化器状态
（论文里的 K = 12）占了四分之三，这正是 ZeRO 先切分它们的原因。激活值和临时缓冲区另算。一个刁钻的追问：用 Adam 做 fp32 训练
同样是 16 字节（4 + 4 + 8）。混合精度并没有缩小模型状态，它只是把 4 字节挪进了优化器状态，并让计算和通信的量减半。

</details>

## Q2. Ψ 个参数、N 个 rank，每个 ZeRO stage 下每个 rank 需要多少显存？

**先预测，再运行。** 写出四个公式，然后代入本章的模型（Ψ = 16,640）和 N = 4：stage 0 到 3 每个 rank 各多少字节？Ψ = 75 亿、N = 64 时呢？

""" + ANSWER + r"""

每个 stage 比上一个多切分一种模型状态：

| stage | 切分什么 | 每个 rank 的字节数 | Ψ = 7.5B，N = 64 |
|---|---|---|---|
| 0（DDP） | 不切分 | 2Ψ + 2Ψ + 12Ψ = 16Ψ | 120 GB |
| 1 | 优化器状态 | 2Ψ + 2Ψ + 12Ψ/N | 31.4 GB |
| 2 | + 梯度 | 2Ψ + (2 + 12)Ψ/N | 16.6 GB |
| 3 | + 参数 | (2 + 2 + 12)Ψ/N | 1.9 GB |

不管 N 多大，stage 1 都不会低于 4Ψ，stage 2 不会低于 2Ψ；只有 stage 3 一直按 1/N 下降。（DeepSpeed 自己的估算器算得稍多一些：见 Q14。）

</details>
"""),
"ch11-04": ("b395745035e4", r"""
## Q3. 每个 stage 每步通信多少，和 DDP 比如何？为什么 stage 3 是 3Ψ？

**先预测，再运行。** 对每个 stage，说出一步里有哪些集合通信、各多大（以 Ψ 为单位），分别按 DeepSpeed 的做法和论文的做法。

""" + ANSWER + r"""

DDP 对梯度做 all-reduce：2Ψ（一次 all-reduce 就是一次 reduce-scatter 加一次 all-gather）。**论文**里的 stage 1 和 2
把这次 all-reduce 拆成两半，把优化器更新夹在中间：对梯度做 reduce-scatter（Ψ；每个 rank 拿到自己那一片的和），更新这一片，
再 all-gather 更新后的参数（Ψ）。同样是 2Ψ：通信量不增加，显存却最多降到四分之一或八分之一。
**DeepSpeed 0.19.8 默认并不这样做**：它对每个梯度桶做 all-reduce（2Ψ），每个 rank 留下自己负责的那几段，然后 all-gather 参数（Ψ），所以
stage 1 和 2 都是 **3Ψ，DDP 的 1.5 倍**（原因见 Q4）。
Stage 3 不持有完整参数，所以每一层在前向之前都要 all-gather（Ψ），在反向之前还要**再来一次**，因为收集来的副本在前向之后已经释放（Ψ），
然后对梯度做 reduce-scatter（Ψ）：**3Ψ**，论文和 DeepSpeed 都是如此。更新之后没有 all-gather：每个 rank 更新自己的分片，
下一次前向再去收集。在面试现场可以这么说：“论文说是 2Ψ、2Ψ、3Ψ；DeepSpeed 的默认设置从 stage 1 起每个 stage 都搬 3Ψ”。

Stage 1 和 2 默认搬的是 DeepSpeed 的 3Ψ（all-reduce 2Ψ + all-gather Ψ），只有打开 zerolab 的 `ideal_reduce_scatter` 开关，
才是论文的 2Ψ（reduce-scatter Ψ + all-gather Ψ）；stage 3 两种情况下都是 3Ψ。最后一行读作 stage 3 的一步。
本章的配置在复用距离为 0 时关掉了预取（`stage3_prefetch_bucket_size` 为 0），这就是论文的调度，DeepSpeed 用这两个键跑的也正是它。
前向在每层运行之前收集它；反向按相反的顺序，在每层自己的反向之前再收集一遍，因为每层在前向之后都已释放。
梯度被装进每个 `reduce_bucket_size` 个元素的桶里（默认 5·10⁸，这里整个模型就是一个桶），每个桶一次 reduce-scatter，
即 `rs(0)`，而不是每层一次。DeepSpeed 的默认设置搬得更少。复用距离为 10⁹ 时，或者复用距离为 0 但用默认的预取时，
很快会被再次用到的层一直收集着（它的预取器把扫过的每个反向使用都记为已取过），stage 3 只搬 2Ψ，第 8 章会量它。
（zerolab 自己的顺序检查，即 DeepSpeed 不发的 16 字节 all-gather，单独记在 `ledger.checks` 里，这里不显示。）

</details>
"""),
"ch11-06": ("4fb7871d4d13", r"""
## Q4. reduce-scatter 和 all-reduce 有什么区别？ZeRO 用的是哪个？

*先自己想一想*：做完之后每个 rank 手里有什么？每个 rank 要发送多少字节？

""" + ANSWER + r"""

**all-reduce** 之后，每个 rank 都持有完整的和；**reduce-scatter** 之后，rank r 只持有其中的第 r 个 1/N。在环上，
all-reduce *就是*一次 reduce-scatter 接一次 all-gather，所以代价是它的两倍：2(N−1)/N·S 对 (N−1)/N·S。ZeRO 的 stage 1-3
只需要自己那一片梯度，所以论文用 reduce-scatter。面试时的一个坑：DeepSpeed 0.19.8 的 stage 1 和 2 默认**不**发 reduce-scatter，而是
每个桶都做 all-reduce（`use_multi_rank_bucket_allreduce`，默认为 true），各个所有者留下自己那一段，所以它们搬的约为 **3Ψ**，
和 stage 3 一样多。原因是：参数组成一块扁平缓冲区，切成 N 个连续的分区，而一个桶是这块缓冲区里的一段，它对这些分区的切割并不均匀，
不是 reduce-scatter 分发的那 N 等份。只有 DeepSpeed 的 stage 3 会调用真正的 reduce-scatter。zerolab 发出的是 DeepSpeed 的集合通信；
论文的 reduce-scatter 是 zerolab 自己的开关 `"zerolab": {"ideal_reduce_scatter": true}`（这时每个桶各自切成 N 个分片）。

</details>
"""),
"ch11-08": ("867243f96a62", r"""
## Q5. 做梯度累积时，为什么 stage 2 的通信比 stage 1 多？

**先预测，再运行。** 每个优化器步 4 个微批次时，stage 1 和 stage 2 各搬多少 Ψ，按 DeepSpeed 的做法和按论文的做法？

""" + ANSWER + r"""

Stage 1 保留完整梯度，所以不管累积多少个微批次，它都能在本地把 4 个微批次的梯度加起来，到累积边界再归约一次：
DeepSpeed 对它们做 all-reduce（2Ψ），再 all-gather 参数（Ψ），每步 3Ψ；论文的 reduce-scatter 则是 2Ψ。Stage 2 只保留自己那一片梯度，
所以没法把一个微批次的完整梯度留到最后：在每个微步里，反向每填满一个桶，它就把这个桶归约掉。k 个微步时，DeepSpeed 的 all-reduce
搬 2kΨ + Ψ，k = 4 时是 **9Ψ**；论文的 reduce-scatter 是 kΨ + Ψ，即 5Ψ。DeepSpeed 的 stage 2 跳不过这一步
（它的 `no_sync()` 不接受 stage 2 和 3）；stage 3 要付 k × 3Ψ。对策：更少、更大的微批次，或者在梯度装得下时改用 stage 1。

</details>
"""),
"ch11-10": ("b04f2a44ea9b", r"""
## Q6. PyTorch FSDP 的切分策略和 ZeRO 的 stage 怎么对应？

**先预测，再运行。** FULL_SHARD、SHARD_GRAD_OP、NO_SHARD、HYBRID_SHARD 各对应哪个 stage？以 Ψ 为单位，stage 2 每步 all-gather
多少个元素，stage 3 呢？

""" + ANSWER + r"""

| FSDP（`ShardingStrategy`） | ZeRO | 做什么 |
|---|---|---|
| `NO_SHARD` | stage 0（DDP） | 对梯度做 all-reduce |
| `SHARD_GRAD_OP` | ≈ stage 2 | 参数每步收集一次，一直保留到反向结束 |
| `FULL_SHARD`（默认） | ≈ stage 3 | 参数在前向之后释放，反向时再收集 |
| `HYBRID_SHARD` | 节点内的 stage 3 | 每个节点内做 FULL_SHARD，节点之间是副本 |

FSDP 没有 stage 1；PyTorch 的 `ZeroRedundancyOptimizer` 才是。在 FSDP2（`fully_shard`）里，开关是 `reshard_after_forward`：
True ≈ stage 3，False ≈ stage 2。这些名字掩盖的区别，就是 Q3 里的那个：参数每步收集一次还是两次，也就是 2Ψ 还是 3Ψ。
（有一处真正的不同：在两步之间，FSDP 的 SHARD_GRAD_OP 只保留参数分片，而 DeepSpeed 的 stage 2 完整保留 16 位参数。）

</details>
"""),
"ch11-12": ("eecd517815e7", r"""
## Q7. 和普通的数据并行相比，ZeRO 会改变训练结果吗？

*先自己想一想*：stage 3 是数据并行的一种近似吗？

""" + ANSWER + r"""

不会。ZeRO 只改变模型状态**放在哪里**；每个 rank 算的前向和反向与 DDP 下完全相同，每个梯度都在所有 rank 上取平均，
优化器做的也是同样的逐元素更新，只不过每个 rank 只更新自己那一片。结果与数据并行训练相等，差别只来自浮点数求和的顺序（最后几位）。
例外是要看整个张量的优化器，比如 LAMB 的信任比，作用在一个分片上就不对了：所以 DeepSpeed 的 ZeRO
只接受它测试过的优化器（torch 的 Adam、AdamW 和 Adagrad；它自己的 fused Adam、CPU Adam、Adagrad 和 Lion），
除非设置了 `zero_allow_untested_optimizer`。

</details>
"""),
"ch11-14": ("1cddf6a9467c", r"""
## Q8. 梯度分片之后，梯度裁剪用的全局范数怎么算？

**先预测，再运行。** rank r 只持有梯度的分片 g_r。它要发送什么、发给谁、多少字节？

""" + ANSWER + r"""

全局 L2 范数是 √(所有元素的 g² 之和)，而求和可以按分片拆开：每个 rank 算出自己分片的平方和，对这一个数做一次 all-reduce（SUM），
得到 Σ_r ‖g_r‖²，每个 rank 再各自开平方。每个分片按自己的范数裁剪是错的：那样每个 rank 缩放的系数都不一样。DeepSpeed 把这一步
和 fp16 的去缩放合在一起：梯度只乘一次 1 / (scale · max(1, norm / clip))，其中 norm 是去缩放之后的范数。
它的 `gradient_clipping` 默认是 1.0（设为 0 即关闭）。在 zerolab 里，同一次小 all-reduce 还顺带传递溢出标志：2 个 float64，共 16 字节。

</details>
"""),
"ch11-16": ("07564442af74", r"""
## Q9. 模型本来就用 bf16 跑，为什么还要 fp32 主权重？

*先自己想一想*：在 bf16 里，1.0 + 0.001 等于多少？

""" + ANSWER + r"""

因为更新量相对于权重很小，16 位格式会把它舍入掉。bf16 有 8 位有效位：在 1.0 附近，相邻两个数相差 2⁻⁷ ≈ 0.0078，
所以加上任何小于它一半的数，得到的还是 1.0。Adam 每步让每个权重移动大约一个学习率，常常是 10⁻⁴ 到 10⁻⁵：在 bf16 里，
这些更新大多每一步都会消失。所以优化器更新的是一份 fp32 副本（主权重，16 字节中的 4 字节），更新在那里累积起来，
每步之后再从它重新舍入出 16 位权重。bf16 比 fp16 更需要这一点（存储的尾数是 7 位，fp16 是 10 位）。

即使 bf16 权重没有变，更新也保存在主权重里；步数足够多之后，主权重越过一个舍入边界，bf16 权重随之改变。没有主权重，这些更新就永远丢了。

</details>
"""),
"ch11-18": ("bb0c12647e62", r"""
## Q10. 为什么 fp16 训练需要损失缩放，而 bf16 不需要？

*先自己想一想*：比较 fp16、bf16 和 fp32 的指数位数。

""" + ANSWER + r"""

**范围。** fp16 有 5 位指数：它能表示的最小数是 2⁻²⁴ ≈ 6·10⁻⁸（一个次正规数，subnormal），最大是 65,504。
很多梯度比这还小，会被舍入成 0。把损失乘以 S，由链式法则，每个梯度也都乘以 S，从而被抬进可表示的范围；优化器再在 fp32 里除以 S。
S 太大又会上溢成 inf，所以 S 需要调节（Q11）。bf16 有 fp32 的 8 位指数，因此范围与 fp32 相同（正规数能小到约 10⁻³⁸）：
梯度实际上不会下溢，它的损失缩放系数是 1。bf16 付出的代价在精度上（Q9）。DeepSpeed 0.19.8 对 bf16 使用固定的缩放系数 1.0，
对 fp16 使用动态缩放器（初始值 2¹⁶）。

</details>

## Q11. DeepSpeed 的动态损失缩放器是怎么变化的？

**先预测，再运行。** S = 2¹⁶，`loss_scale_window` 为 2，`hysteresis` 为 1；只有一个 rank 在第 1 步溢出，仅此一次。
第 0 到 8 步各用多大的 S？把这九个数写下来。

""" + ANSWER + r"""

一旦溢出（*任何*一个 rank 的梯度里出现 inf 或 NaN，用一次 MAX 的 all-reduce 发现），这一步在**每个 rank 上都会跳过**
（不更新参数，调度器也不前进），并且在 hysteresis 用完之后，S 减半，但不低于 `min_loss_scale`（已到最小值时再溢出，训练就会停止）。
连续 `loss_scale_window` 个干净的步之后（默认 1000），S 翻倍。`hysteresis`（默认 2）是削减 S 之前能容忍的溢出次数；
只有 S 增大时它才会重新填满（开启 `consecutive_hysteresis` 时，每个干净的步都会填满）。在 0.19.8 中，翻倍发生在溢出之后的
第 (window + 1) 个干净步。下面期望的轨迹，是从 DeepSpeed 0.19.8 自己的 `DynamicLossScaler` 记录下来的。

</details>
"""),
"ch11-20": ("645bc2d01054", r"""
## Q12. 激活检查点和 ZeRO：各自省下什么？能一起用吗？

*先自己想一想*：显存四巨头里，它们各自缩小的是哪一个？

""" + ANSWER + r"""

ZeRO 在各个 rank 之间切分**模型状态**（参数、梯度、优化器状态）；它对**激活值**毫无作用：激活值是每个 rank 为自己的微批次保存的，
随 batch × 序列长度 × 隐藏维度 × 层数增长。（论文里的 ZeRO-R 只在张量并行下才对激活检查点做分区。）
**激活检查点**在前向中只保留每个块的输入，反向时再重算其余部分：激活值显存从每个块的每个张量
降到每个块一个张量，代价是大约多一次前向（计算量多约 33%）。两者相互独立，常常一起使用；在 ZeRO-3 下，重计算恰好发生在这个块的参数
为反向收集回来的时候，所以参数和梯度仍然搬 3Ψ，DeepSpeed 和 zerolab 都是如此。（zerolab 自己的顺序检查，即 DeepSpeed
不发的 16 字节 all-gather，单独记在 `ledger.checks` 里，不计入这里。）

</details>
"""),
"ch11-22": ("85e11fe24a1c", r"""
## Q13. ZeRO-Offload 和 ZeRO-Infinity 做了什么，代价是什么？

*先自己想一想*：优化器卸载之后，GPU 上还剩下什么？什么要经过 PCIe？

""" + ANSWER + r"""

**ZeRO-Offload**（`offload_optimizer.device: "cpu"`，stage 1-3）把 fp32 主权重和 Adam 的两个矩放在主机内存里，
并**在 CPU 上**运行优化器更新（DeepSpeed 的向量化 CPUAdam）。每一步，fp16 梯度下行到主机，更新后的 fp16 参数再上行回来：
经 PCIe 共 2Ψ + 2Ψ 字节，分摊到各个 rank。配合 stage 2，GPU 上只留下 2 字节的参数，即 2Ψ。**ZeRO-3 offload** 增加了
`offload_param`（仅 stage 3）：参数分片也放在主机上，GPU 上大约只需放下收集来的一层。**ZeRO-Infinity** 把两者都扩展到
**NVMe**（`device: "nvme"`，stage 3），主机内存作为中转缓冲区。代价是时间：PCIe（PCIe 4.0 x16 每个方向约 25 GB/s）
和 CPU 上的 Adam 都比 GPU 慢得多，所以卸载是用来装下原本装不下的模型的。

zerolab 也能跑卸载（第 5 章测量它，第 9 章用它训练）：下面的前几行在 4 个真实 rank 上核对答案里的字节数。
对笔记本电脑装不下的规模，DeepSpeed 的估算器（在 `zerolab.tools.estimate` 里复现，函数签名相同）也能给出字节数，其中 L 是最大一层的参数量，
主机缓冲区系数为 1.5 倍。*在 GPU 集群上*，DeepSpeed 经由锁页（pinned）主机缓冲区做拷贝，用向量化的 CPUAdam 做更新；
这里“设备”也是 CPU，所以能照搬过去的只有字节数，不包括时间。

</details>
"""),
"ch11-24": ("628ed547b22f", r"""
## Q14. 7B 模型能在 8 张 80 GB 的 GPU 上训练吗？70B 模型呢？

**先预测，再运行。** 按每个参数 16 字节算，7B 模型在 8 张 80 GB 的 GPU 上，哪些 stage 装得下？70B 模型在 stage 3 需要多少张 GPU？

""" + ANSWER + r"""

先看模型状态。7B：16Ψ = 112 GB，所以 DDP 在一张 80 GB 的 GPU 上装不下；stage 1 每张 GPU 需要 4Ψ + 12Ψ/8 = 38.5 GB，
stage 2 需要 26.25 GB，stage 3 需要 14 GB，都装得下，还给激活值留了空间。70B：总共 16Ψ = 1,120 GB；即便是 stage 3，也要
16Ψ/N ≤ 80 GB，所以还没算任何激活值就需要 N ≥ 14；DeepSpeed 的估算器（18Ψ/N + 4L，它还算上一个 fp32 的梯度分区）给出的是
16 张 GPU 且毫无余量，所以稳妥的回答是 32 张 GPU，或者卸载优化器（Q13）。然后再加上**激活值**（用检查点时，每层约 2·seq·batch·hidden 字节，
再加一整层的完整激活值）、梯度桶、stage 3 收集来的层，以及内存碎片。如果用了卸载，还要再核对主机内存。

</details>
"""),
"ch11-26": ("fbc454d794d3", r"""
## Q15. 什么是通信的 α-β 模型？它告诉你该怎么做？

**先预测，再运行。** 64 次 16 KiB 的 all-reduce，还是 1 次 1 MiB 的 all-reduce（字节数相同）：在这台机器上哪个更慢？
为什么各个框架都要把梯度装进桶里？

""" + ANSWER + r"""

一次搬运 S 字节（每个 rank 发出的）的集合通信耗时 T(S) ≈ α + S/β：α 是一次调用的固定开销（延迟，包括启动、同步、跳数），
β 是带宽。n 次调用共搬 S 字节，代价是 n·α + S/β。低于 α·β 字节时，一次调用几乎全是延迟，所以大量小张量会白白浪费时间：
把它们**分桶**（DeepSpeed 的 `reduce_bucket_size`，DDP 的 `bucket_cap_mb`），并让这些调用与反向**重叠**（`overlap_comm`）。
再往环形 all-reduce 内部看：一个 B 字节的张量在 N 个 rank 上，α 和 β 改按环上的每一步计，耗时为 2(N−1)·α + 2(N−1)/N·B/β。
延迟项随 N 增长，带宽项几乎不变。我们在这台机器的 2 个 rank 上拟合它（时间因机器而异，每次运行也不一样：只打印，从不据此下结论；
第 6 章画出了拟合）。

</details>
"""),
"ch11-28": ("d7b992a3ca6a", r"""
## 再练两道

自己动手，每道都只需改上面的一个数再重新运行：

- 运行 `crew.run(measured_step, 2, use_multi_rank_bucket_allreduce=False)[0]`，像 Q4 最后几行那样去读它：
  现在 DeepSpeed 对每个桶发的是哪种集合通信，多少个 Ψ？
- 在 Q5 里，用 4 个微步运行 stage 3：每个优化器步多少个 Ψ，为什么是 12？
"""),
}
