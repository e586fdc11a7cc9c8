"""第 2 章「数据并行之痛」与练习 2 的中文（tools/build_notebooks/ch02.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。英文改动后哈希对不上，
tests/test_zh_edition.py 会点名该单元格；改好中文后运行
``python tools/build_notebooks/zh_edition.py --accept <单元格 id>``。
"""

ZH = {
"ch02-00": ("f51a0242ea66", r"""
# 第 2 章 · 数据并行之痛

*人人全量，人人都得停下来对账。*

假如搬家队沿用老规矩：**每个工人都背一整套**家具、搬迁贴纸和队长那本厚厚的小本子。多雇一个工人，整套家当就被原样背了两份；
雇四个，就背了四份。谁的背包都没有轻一点。

还有第二笔开销。每个工人拆的是不同的房间，各自摸清的摆放规矩也不一样。所以每拆完一个房间，大家都要停下来**对一遍笔记**：
把所有人的贴纸加起来，每个人都抄下这个总数，好让每一份搬家方案始终一字不差。

这条老规矩就是**数据并行**（data parallelism，PyTorch 的 DDP）。每个 rank（每张 GPU）都持有*完整的*模型，拿自己那一份 batch，
算出自己的梯度（gradient）；然后一次 **all-reduce** 把所有 rank 的梯度加起来（再除以 N），于是每个 rank 做同一次优化器更新，
各份副本永远不会分叉。模型小的时候，它简单又好用；模型一大就撞墙：混合精度加 Adam 时，不管 N 是多少，
每个 rank 都要持有 **16Ψ 字节**的模型状态（model states，第 1 章）。加 GPU 只加速度，不加空间。这就是**显存墙**（memory wall）；
第 3 章会打破它，本章先量一量为什么非打破不可。

**本章内容**，都在真实的 rank 上跑（这里是 CPU 上的 gloo，GPU 上则是 NCCL）：从零写的 DDP 训练结果与单进程一致；
把环形 all-reduce 拆成两半分别称重；引擎一步的账本（ledger）；rank 增加时每个 rank 的显存；以及 40 GB 和 80 GB GPU 上的那堵墙。

**单位。** Ψ = 参数个数（元素数）；N = rank 数；b = 每个元素的字节数（fp16/bf16 为 2，fp32 为 4）；大小以字节（B）计；
**GB = 10⁹ B**，**GiB = 2³⁰ B**。
"""),
"ch02-02": ("1bb2dddc47f6", r"""
## 1 · 从零写一个 DDP

zerolab 的 **stage 0** 就是亲手写出来的 DDP 算法（`zerolab/zero/reduce.py` 里的 `AllReduceAtBoundary`，`zerolab/zero/params.py` 里的
`ReplicatedParams`），归约梯度的方式与 DeepSpeed 的 stage 0 相同。在每个 rank 上：参数放在一块扁平缓冲区（flat buffer）里，启动时从
rank 0 复制过来；反向传播把每个梯度累加进一块扁平的梯度缓冲区；到了更新时，梯度先除以 N 再做 **all-reduce**，于是每个 rank
都拿到全局 batch 的*平均*梯度，并用它做同一次 AdamW 更新。

与 PyTorch 的 DDP 有一处不同。DDP 最关键的优化是：反向传播一填满一个桶（bucket，`bucket_cap_mb`，25 MB）就立刻对它做 all-reduce，
让通信和剩下的反向传播*重叠*（overlap）；而 DeepSpeed 的 stage 0 是在反向传播结束后，按 5·10⁸ 个元素一桶做 all-reduce。
两种做法的通信量一样，差的只是时间。

对每个 N，我们都在同一个 12 条序列的全局 batch 上用 fp32 训练 3 步（每个 rank 分到 12、6、4 或 3 条），每个 rank 还会
单独拿全部 12 条，按单进程训练一遍作为对照（`ch02.train_ddp_and_single`）。

**先预测，再运行。** 训练 3 步之后，N = 3 的 3 个 rank 持有的参数会和单进程的完全相同吗？还是很接近？这 3 个 rank 的副本*彼此之间*
会逐位相同吗？
"""),
"ch02-04": ("1b871f39a093", r"""
与单进程相等，差别在 float32 的舍入以内，但并非逐位相同：同样的数换个顺序相加（先在 rank 内，再跨 rank），最后一位的舍入就不一样
（在 1 附近，相邻两个 float32 数相差约 10⁻⁷）。而各份副本**彼此逐位相同**，每个 N 都是：每个 rank 对同一个 all-reduce 后的梯度
做同一次更新，不可能分叉。

## 2 · 对笔记：环形 all-reduce，拆成两半称重

第 0 章搭好了搬家队对笔记用的环：先是 N−1 步 **reduce-scatter**，之后 rank r 持有第 r 块在所有人上的和；再是 N−1 步
**all-gather**，把算好的各块沿环再传一圈；每一步每个 rank 发出一块，Ψ/N 个元素。我们把两半分开称，因为 ZeRO（第 3 章）
正是把它们拆开来用的。在每个搬家队上，`ch02.ring_bytes` 用第 0 章的环（只用点对点的 send/recv）对一个 Ψ = 7,204 个元素
（14,408 B）的 bf16 梯度做 all-reduce，给两半各记一本账，并拿结果和库里的 `dist.all_reduce` 核对。

**先预测，再运行。** 4 个 rank 时，为了对这 14,408 B 做 all-reduce，每个 rank 要发出多少字节：14,408？它的四倍？还是更少？
写下一个数。
"""),
"ch02-06": ("e019e86b0ccb", r"""
N = 4 时是 21,612 B，梯度大小的一倍半：每一半是 (N−1)/N·Ψ·b，整个 all-reduce 是 **2(N−1)/N·Ψ·b**。很多人猜是梯度的 N 倍，
因为每个 rank 都得听到其他每个人的数据；可在环里，每个 rank 转发的是部分和，每步一块，所以不管搬家队多大，它发出的都不会超过
2Ψ·b。任何 all-reduce 每个 rank 发出的字节都不可能更少（Patarasuk 和 Yuan，2009），NCCL 的环形算法发出的正是这么多。
N = 3 时各 rank 之间差 2 个字节：7,204 个元素切成 2,402 + 2,401 + 2,401 三块，所以公式给出的 19,210.7 B 是个平均值。

按每个 rank 算，2(N−1)/N 只是慢慢逼近 2。但整个搬家队每一步搬的是它的 N 倍，而且环的 2(N−1) 步每步都要付一次延迟（latency），
所以即使每个 rank 的字节数几乎不变，一次 all-reduce 的*时间*仍随 N 增长：
"""),
"ch02-08": ("ff1e3af9f7c4", r"""
## 3 · 引擎自己的账本：DDP 的一步

引擎不用教学用的那个环：它通过自己的 `Comm` 经 `torch.distributed` 调用库里的集合通信（collective；这里是 gloo，GPU 上是 NCCL，
各自在内部选择算法），`Comm` 会把**每一次调用记进账本**。账本里的“发送字节数”（wire bytes）按环形算法每个 rank 会发出的量来计，
这样引擎的通信量就能和公式并排对照。`ch02.one_step` 在每个搬家队上用**混合精度**（bf16 的参数和梯度，fp32 的主权重和 Adam 状态）
训练一步，并保留这一步的账本以及每个 rank 之后持有的显存。

**先预测，再运行。** TinyLM 有 16 个可训练的参数张量。在 2 个 rank 上，stage 0 的一步会做几次 all-reduce，每次多少个元素？
"""),
"ch02-10": ("144b1d954d3c", r"""
**一次 all-reduce** 就搬完整个梯度，而不是 16 次：DeepSpeed 的 stage 0 按 5·10⁸ 个元素一桶来装梯度，远多于这个模型的参数量，
每个桶作为一条消息做 all-reduce（消息越少越大，浪费在每次调用延迟上的时间就越少；第 6 章会实测）。最后一行不是梯度：
一次 2 个元素的 all-reduce 同时问所有 rank“有谁见到 inf 或 NaN 了吗？”，并捎上梯度范数的平方，供梯度裁剪（gradient clipping）使用。
（zerolab 照 DeepSpeed 0.19.8 的做法，bf16 的每一步默认都做这个检查，`bf16.check_grad_overflow`。）下面是扁平缓冲区，
以及每个搬家队上的同一步：
"""),
"ch02-12": ("11736b90a78c", r"""
每个 N 都是每步一次调用，恰好 Ψ = 7,204 个元素：就是梯度本身，不含扁平缓冲区的**补齐**（padding；补到 N 的整数倍，N = 3 时为
7,206，因为所有 ZeRO stage 都共用这种布局，第 3 章要把它切成 N 个等大的分区（partition））。发送字节数是梯度字节数的 2(N−1)/N 倍：
又是那个环形公式，这次用在引擎自己的通信上。

## 4 · 每个 rank 的显存：谁的背包都没变轻

第 1 章称过一个背包：混合精度加 Adam 时，每个参数要花 2 B（bf16 参数）+ 2 B（bf16 梯度）+ 12 B（fp32 主权重、动量和方差）
= **16 B**。

**先预测，再运行。** Ψ = 7,204 时，只有 1 个人的搬家队里，一个 rank 持有多少字节的模型状态？4 个人的搬家队呢：是它的四分之一、
一样多，还是更多？下一个单元格把上面那一步之后 `engine.memory()` 在每个 rank 上测得的值和公式并排打印：
"""),
"ch02-14": ("07ac403c2c45", r"""
一样多，上下差几十个字节：rank 加进来，**每个 rank 的显存并不减少**，整个搬家队背着 N 份。多出来的每个字节都有着落：
每个补齐元素 16 B（它和其他元素一样有参数、梯度和优化器状态），扁平缓冲区的优化器状态里 Adam 那个 4 字节的 `step` 计数器，
以及冻结的标量 `temperature`（bf16 下 2 B，没有梯度，也没有优化器状态）。

## 5 · 显存墙

TinyLM 的 115 kB 放在哪儿都装得下。把 Ψ 放大，同样的每个参数 16 字节就会撞上 GPU 的容量。真实的 ZeRO 训练用的是
**标称“40GB”和“80GB”的 A100 GPU**。有两点要注意：存储芯片按二进制容量生产，所以一张“40GB”的卡更接近 40 **GiB**
（在 A100-SXM4-40GB 上，CUDA 的 deviceQuery 报告约 42.3 GB；具体数字取决于卡、驱动和 ECC）；而且 GPU 上装的不只是模型状态，
激活值（activations）、临时缓冲区、CUDA 上下文和显存碎片都要占一份，所以真正的上限还要更低。

**先预测，再运行。** 在 DDP 下，模型状态能装进一张 80 GB GPU 的最大模型有多少参数？64 张呢？
"""),
"ch02-16": ("5ac1ca225ee5", r"""
**50 亿个参数**，一张 GPU 也好，64 张也好：DDP 那条线随 N 纹丝不动。把标称容量按 GB 读，40 GB 的 GPU 止步于 25 亿，80 GB 的止步于
50 亿，这还没算一个激活值；按 GiB 读，则是 26.8 亿和 53.7 亿。一个 70 亿参数的模型在*每张* GPU 上都要 112 GB；70B 的模型每张要
1,120 GB。只有分摊负重（像图中 ZeRO-3 那条点线那样），才能让这条线往上走。

## 本章测得的

在 TinyLM 上，Ψ = 7,204 个可训练参数，搬家队从 N = 1 到 4 个 rank：

- DDP（zerolab 的 stage 0）在每个 N 下训练出的参数都与单进程一致，差别在 float32 舍入以内；各 rank 的副本逐位相同。
- 对 Ψ 个 bf16 元素做环形 all-reduce = reduce-scatter + all-gather，各发 N−1 次：每个 rank 发出 2(N−1)/N·Ψ·2 B
  （N = 1-4 时为 0、14,408、19,210-19,212 和 21,612 B）。
- 引擎的一步：每个 N 都是一次 Ψ 个元素的梯度 all-reduce（DeepSpeed 的 stage 0，每桶 5·10⁸ 个元素），外加一次 2 个元素的溢出/范数检查。
- 每个 rank 的模型状态：16Ψ = 115,264 B，再加几十个字节的补齐、step 计数器和一个冻结的标量，不随 N 变化；整个搬家队持有它的 N 倍。
- 按每个参数 16 B 算的显存墙：40 GB 装得下 25 亿个参数，80 GB 装得下 50 亿。

用故事的话说：老规矩让每个工人都背着整栋房子，每拆完一个房间还要停下来，沿着环把贴纸的总数传一圈。这个环已经是传纸条最省的办法
（不管多少工人，每人约 2Ψ），所以压垮 DDP 的不是通信量。**是显存**：每个 rank 16Ψ，不随 N 变化。第 3 章就不再让大家背重复的东西了。

### 思考题

1. N 增大时，环上每个 rank 的字节数趋近 2Ψ·2 B。为什么加 rank 不会让每个 rank 的通信量增长？随 N 增长的又是什么？
2. 用 `crew.run(one_step, BATCHES, reduce_bucket_size=500)` 重跑第 3 节：stage 0 会做更多次 all-reduce 吗？再加上 `stage=1`：
   现在每步做几次梯度 all-reduce，字节数变了吗，账本上还多出了什么？（第 3 章会解释。）
3. 这里的 stage 0 和 DeepSpeed 一样在反向传播结束后做 all-reduce；PyTorch 的 DDP 则让各个桶与反向传播重叠。本章的哪些测量结果
   会因为重叠而改变？
4. 在显存墙的图上查一查 13B 的模型：在 DDP 下每张 GPU 要多少 GB 的模型状态？单是模型状态，ZeRO-3 需要多少张 80 GB 的 GPU？

### 轮到你了：亲手写环

打开 [**`exercises/zh/02_ring_reduce_scatter.ipynb`**](../../exercises/zh/02_ring_reduce_scatter.ipynb)
（参考答案在 [`solutions/zh/`](../../solutions/zh/02_ring_reduce_scatter.ipynb) 里）。你要写环的 reduce-scatter 那一半，
手里只有一个 `send_recv(send_tensor, recv_tensor)`：它把一块传给右边，同时从左边收一块。检查程序会在 2、3、4 个 rank 的真实搬家队上、
用大小不均的块运行你的函数，统计你发出的字节，然后用*你的*环作为 DDP 的梯度 all-reduce 来训练。
"""),
"ex02-00": ("424c038ef18a", r"""
# 练习 2 · 环形 reduce-scatter

*搬家队围成一圈。每个工人每次可以把一捆笔记传给右边、同时从左边接过一捆。怎样才能让每个人最后都握着房子某一部分的完整总数？*

在第 2 章里你测过环形 all-reduce：一次 **reduce-scatter** 接一次 **all-gather**，每个 rank 发出 2(N−1)/N·Ψ 个元素。
这里由你来写前一半。

**你的函数**在一个真实搬家队的每个 rank 上运行：

```python
def ring_reduce_scatter(chunks, rank, world_size, send_recv):
    ...
    return chunks
```

* `chunks`：本 rank 的张量，已经切成 `world_size` 个一维的块（用 `tensor_split` 切的，所以大小可能相差一个元素）。
  rank r 的第 i 块，就是 rank r 对第 i 块的贡献。
* `send_recv(send_tensor, recv_tensor)`：环上的一步。它把 `send_tensor` 发给右邻居（rank + 1 mod N），同时把左邻居
  （rank − 1 mod N）发来的内容填进 `recv_tensor`。每个 rank 调用它的次数必须相同。
* 返回时，`chunks[rank]` 必须是**第 `rank` 块在所有 rank 上的和**。（其余各块可以是部分和；之后的 all-gather 会把它们覆盖掉。）

**环的规矩。** 一共走 N − 1 步。想想某一块（比如第 c 块）的旅程：它的部分和要把每个 rank 都走一遍，每到一处加上那个 rank 的贡献，
并在最后一步结束时完整地到达 rank c。它每一步向右移一个 rank。那么它该从哪里出发？第 s 步时，rank r 手上正在传的是哪一块？
一个 rank 收到的，正是它左邻居发出的那一块；把它加到你自己那份同一块上。

别直接收进某一块：`send_recv` 会覆盖掉你自己的贡献。收进一块新的缓冲区（`torch.empty_like`），再加上去。

**检查不通过时**，它会用几行话说明哪里错了、期望的是什么，再给一条点出可能错误的提示。想同时看完整的 Python 回溯
（traceback；包括 zerolab 自己的代码，以及任何一个 rank 上的回溯），运行 `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，
再运行一次检查单元格（`zerolab.course.checks.full_tracebacks(False)` 让报错恢复简短），或者在启动 Jupyter 时设置环境变量
`ZEROLAB_FULL_TRACEBACK=1`。
"""),
"ex02-03": ("456f98bb9313", r"""
**看看你的环。** 这个单元格在 4 个 rank 上运行一次你的函数，逐步打印每个 rank 把哪一块传给了右边、然后改动了哪一块（也就是把左边
传来的内容加到了哪一块上）。环写对了的话，每一列都是递减的，而 rank r 在第 s 步加进去的那一块，正是 rank r − 1 在第 s 步发出的那一块。
"""),
"ex02-05": ("c478bf3ef5a1", r"""
**检查。** 它在 2、3、4 个 rank 的搬家队上，用 11、14、18 个元素的张量（所以各块大小不均）运行你的函数，把 `chunks[rank]` 和真正的和
对比；每个 rank 的输入都经过设计，和错了时能看出少了哪些 rank 的贡献。它还统计每个 rank 发出的字节：环会把除自己那块以外的每一块
恰好发一次，即张量的 (N−1)/N。最后，它把你的函数接进 zerolab 的 stage 0，作为梯度 all-reduce（先是你的 reduce-scatter，再接一次环形
all-gather），在 3 个 rank 上训练 TinyLM：参数必须与单进程训练的结果一致。
"""),
"ex02-07": ("468d5bcf023b", r"""
**更进一步。**
* 另一半，all-gather，是练习 0（`exercises/zh/00_ring_all_gather.ipynb`）：rank r 一开始手里是算好的 `chunks[r]`；走 N − 1 步后，
  每个人都有了每一块。你的 reduce-scatter 再接上它，就是一个完整的环形 all-reduce。
* 数一数字节：reduce-scatter 是 (N−1)/N·Ψ，all-gather 也一样。
  Patarasuk 和 Yuan（2009，“Bandwidth optimal all-reduce algorithms for clusters of workstations”）证明了
  任何 all-reduce 每个 rank 发出的都不少于 2(N−1)/N·Ψ，这就是 NCCL 的环和你写的长得一样的原因。
"""),
}
