"""第 0 章「认识搬家队」与练习 0 的中文（tools/build_notebooks/ch00.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。见 tools/build_notebooks/zhsource.py。
"""

ZH = {
"ch00-00": ("55d48006b221", r"""
# 第 0 章 · 认识搬家队

> **(Boxes instead of Chinese below? The machine that runs your browser has no CJK font: install one, Debian/Ubuntu: `sudo apt-get install fonts-noto-cjk`, then reload this page; `zerolab report --preflight --lang zh` checks the machine it runs on.)**
>
> 下面的中文如果显示成方框（□□□），说明运行浏览器的机器缺少中文字体，装好后刷新本页即可。

*一屋子家当要搬，一双手搬不完。*

一家人要搬家。家具太多，一个工人搬不完，于是这家人请了一支**搬家队**（crew）。每个工人胸前都别着一块写了编号的工牌：
0、1、2、3。这个编号就是工人的 **rank**，工人的总数就是**总 rank 数**（world size）。0 号工人是**领班**（foreman）：
他和大家一样搬箱子，但全队需要统一口径的时候（以谁手里那份户型图为准、由谁来汇报），开口的是 rank 0。
而坐在这个 notebook 前的你，就是**队长**（captain）：你的每条命令同时下达给全队，每个工人也都向你汇报。

训练大模型就是这样一场搬家。家当就是模型：它的参数、梯度，还有优化器那本厚厚的、记满运行统计量的小本子。一张 GPU 背不下这么多，
于是由 N 个进程分担。每个进程是一个 `torch.distributed` **进程组**（process group）里的一个 **rank**。工人们不共用背包：
每个进程有自己的内存，一个 rank 需要另一个 rank 手里的任何东西，都得**隔着屋子喊过去**。全队一起喊的一嗓子，
就是一次**集合通信**（collective）。

喊话怎么传过去，由**后端**（backend）决定：

* **gloo** 是在院子里扯着嗓子喊：任何机器都能用，在 CPU 进程之间走普通的 socket（这里走本机回环地址 127.0.0.1）。
  本课程里 CPU 上的 rank 用的就是它。（zerolab 还给同一台机器上的 CPU rank 准备了一块共享白板，也就是共享内存，
  但只在你明确要求时才启用：`zerolab.Crew(N, backend="shm")`，见第 6 章。）
* **NCCL** 是 GPU 之间拉好线的对讲机（NVLink、PCIe、InfiniBand）：快得多，但要求每个 rank 各有一张 GPU。

`backend="auto"` 在每个 rank 都分得到一张 GPU 时选 NCCL，否则选 gloo。

| 故事里 | 在 `torch.distributed` 里 | 在本 notebook 里 |
|---|---|---|
| 一个工人 | 一个 rank（一个进程） | `zerolab.rank()` |
| 搬家队的人数 | 总 rank 数 N | `zerolab.world_size()` |
| 领班 | rank 0 | broadcast 的源 rank |
| 队长 | 启动器（launcher） | 你，通过 `crew.run(fn)` 下令 |
| 全队一起喊的一嗓子 | 一次集合通信 | `Comm.all_reduce` 等 |
| 院子里喊话还是对讲机 | 后端：gloo 或 NCCL | `backend="auto"` |

本章我们先雇一支四人搬家队，听每个工人做自我介绍；再看构成 ZeRO 全部通信的四种喊话，数一数每种喊话发出了多少字节；
最后只用最基本的点对点收发（send / recv），亲手搭出其中最重要的那一种：环形 all-reduce（ring all-reduce）。
"""),
"ch00-01": ("c4a476f4c73f", r"""
## 1. 雇一支搬家队

`zerolab.Crew(N)` 启动 N 个进程，把它们组成一个进程组。启动要花一两秒，所以整章只雇**一次**搬家队，之后一直用它；
此后每次 `crew.run(fn)` 只需大约一毫秒。四个 rank 在任何机器上都跑得起来，哪怕是双核的笔记本：它们大部分时间都在互相等待。
"""),
"ch00-03": ("c6f9b4bd8d09", r"""
## 2. 工人们自我介绍

`crew.run(fn)` 在每个 rank 上同时运行 `fn`，把各个 rank 的返回值收成一个列表带回来（下标就是 rank）。
rank 打印的内容也会带回来，按 rank 分组、按 rank 顺序排好。在 `fn` 里，`zerolab.rank_info()` 告诉这个 rank 它是谁，
`torch.distributed` 也已经可以直接用了。张量放在 `zerolab.device()` 上，也就是这个 rank 的设备
（这里是 CPU；用 NCCL 时是这个 rank 自己的那张 GPU），所以同一个函数在两种环境下都能运行。
"""),
"ch00-05": ("c822286b7e4c", r"""
只有一件事取决于你的机器：搬家队怎么喊话。这里是 CPU 进程之间的 gloo；GPU 足够多的地方，则是每个 rank 各占一张 GPU 的 NCCL。
"""),
"ch00-07": ("930fdf7a88f3", r"""
## 3. 四种喊话

ZeRO 在网络上做的每一件事，都是下面四种集合通信之一：

| 集合通信 | 之前 | 之后 | ZeRO 在哪里用它 |
|---|---|---|---|
| **all-reduce** | 每个 rank 各有自己的向量 | 每个 rank 都拿到总和 | 普通的数据并行（data parallelism）：对梯度求平均（第 2 章） |
| **reduce-scatter** | 每个 rank 各有一个完整向量 | rank r 只拿到总和的**第 r 片** | stage 3，以及 ZeRO 论文里的 stage 1 和 2：每个 rank 只保留属于自己的那一片梯度，即它的分片（shard）；DeepSpeed 的 stage 1 和 2 改用 all-reduce（见第 3 章） |
| **all-gather** | rank r 有第 r 片 | 每个 rank 都有全部各片 | stage 1 到 3：用各个分片重建完整的参数（第 3 章） |
| **broadcast** | 只有源 rank 有数据 | 每个 rank 都有一份副本 | 领班把同一套初始权重发给所有人 |

它们都经过 `zerolab.comm.Comm`：它调用 `torch.distributed`，并把每次调用记进一本**账本**（ledger），记下操作、元素数、字节数、dtype、
耗时，外加一个说明这次调用缘由的标签（tag）。

图中每一行是一个 rank，每一格是它持有的一个数。**颜色表示这份数据是谁的**：每个 rank 一种颜色，深灰色表示对所有 rank 求出的和，
白色表示这个 rank 手里没有的格子。数值是特意挑过的，一眼就能读懂：rank r 在位置 i 上的初始值是 `10·r + i`，
所以十位数是 rank，个位数是位置。这些图由 `zerolab.course.viz.collective_grids` 根据各 rank 的返回值画出；`show` 只负责把 rank 打印的内容排好格式。

### All-reduce：每个 rank 最后都拿到总和

每个 rank 持有 8 个属于自己的数：rank r 在位置 i 上是 10·r + i。`all_reduce` 之后，每个 rank 持有的都是四个 rank 逐元素相加的和。

**先预测，再运行。** all-reduce 之后，rank 2 在位置 3 上是多少？rank 0 呢？把这两个数写下来。
"""),
"ch00-09": ("56593803987d", r"""
两个都是 72：位置 i 上的和是 (0 + 10 + 20 + 30) + 4·i = 60 + 4·i，每个 rank 拿到的都是同一个和。给 rank 2 写 23 的人，
是以为它还留着自己的数：all-reduce 之后，没有哪个 rank 还只拿着自己的数据，人人拿到的都是所有人的。

### Reduce-scatter：每个 rank 最后拿到总和的一片

这 8 个数分成 4 片，每片 2 个。`reduce_scatter` 之后，rank r 只持有总和的**第 r 片**：每人四分之一，合起来正好是完整的结果。
ZeRO stage 3（以及 ZeRO 论文的 stage 2）就是这样保存梯度的：没有哪个 rank 会持有全部梯度。
（DeepSpeed 的 stage 2 改用 all-reduce，再由每个 rank 留下自己那一片：第 3 章会掂量两者的差别。）

**先预测，再运行。** reduce-scatter 之后，rank 1 会持有哪两个数？
"""),
"ch00-11": ("167cc5980cb8", r"""
### All-gather：每个 rank 最后拿到全部各片

68 和 72：它们是 all-reduce 那个和的位置 2 和 3，而不是 rank 1 自己的 12 和 13。和还是原来那个和，只是每个 rank 只留下其中四分之一。

all-gather 是反过来的操作。rank r 起初只有第 r 片（位置 2r 和 2r+1，所以它的数是 10·r + 2r 和 10·r + 2r + 1），
`all_gather` 之后，每个 rank 都按 rank 顺序持有全部四片。在 ZeRO stage 3 中，一层的完整权重就是这样在即将用到之前，
由各个 rank 保管的分片重建出来的。
"""),
"ch00-13": ("0130eff39696", r"""
### Broadcast：领班把他那份发下去

只有 rank 0 有户型图；其他 rank 手里是一块空缓冲区（全是 0）。从 rank 0 做 `broadcast` 之后，每个人都拿到了领班那一份。
所有 rank 就是这样从同一套权重出发的。
"""),
"ch00-15": ("3d4f90b4a710", r"""
## 4. 账本：每个 rank 发出的字节

上面的每次调用都经过 `default_comm()`，也就是这个 rank 自己的 `Comm`，每个 rank 都把它记进了自己的账本。
整章里这些 rank 都是同一批进程，所以账本一直都在：把某个集合通信的单元格再运行一次，它就会被记两次。

账本直接从张量本身量出每次调用搬了多少：完整张量的元素数和字节数 **S**（reduce-scatter 取它的输入，all-gather 取它的输出）。
再由 S 算出**每个 rank 发出的字节数**，沿用 nccl-tests 计算总线带宽（bus bandwidth）时的约定，也就是带宽最优的环形算法实际发送的量：

* all-reduce：**2(N−1)/N · S**（它就是一次 reduce-scatter 紧接着一次 all-gather）
* reduce-scatter 和 all-gather：**(N−1)/N · S**（每个 rank 发出 N 片中的 N−1 片）
* broadcast：**S**（在流水线式的链条上，除根以外的每个 rank 都要收到全部数据）

N = 4 时，这几个系数分别是 1.5、0.75、0.75 和 1。

**先预测，再运行。** 上面四次调用搬的都是由 8 个 float32 组成的张量，S = 32 字节。对每次调用，账本会记下每个 rank 发出多少字节？
四者之中哪个最贵？
"""),
"ch00-17": ("0cbe30780a7e", r"""
all-reduce 最贵，48 字节，是张量的一倍半：它就是一次 reduce-scatter（24）紧接着一次 all-gather（24）。broadcast 搬 S，即 32。
下面把同样的合计值和手写的公式并排列出：
"""),
"ch00-19": ("32af2400a21b", r"""
这些是按环形算法的约定算出来的每个 rank 的字节数，还不是对通信量（traffic）的测量。下一节亲手把这个环搭出来，
一次 `send` 一次 `send` 地数它真正发了多少。

## 5. 从零实现环形 all-reduce

每个 rank 只发出数据的 2(N−1)/N，不管搬家队多大都不到张量的两倍，怎么能让每个 rank 最后都拿到总和？
工人们站成一个**环**（ring）：每人把东西递给右边的邻居（rank r 递给 rank r+1，rank N−1 再递回 rank 0），同时从左边的邻居那里接东西。
每个 rank 把自己的张量切成 N 块。

1. **Reduce-scatter，N−1 步。** 每一步，每个 rank 把一块发给右边，同时把从左边收到的那块加到自己手里对应的那一块上。
   一个部分和沿着环往前传，每经过一个 rank 就多加上一份贡献。N−1 步之后，rank r 持有第 r 块在全部 N 个 rank 上的总和。
2. **All-gather，N−1 步。** 每个算完的块再沿环走一圈，这回是替换而不是相加，直到每个 rank 都持有全部各块。

一共 2(N−1) 步，每一步里每个 rank 都发出一块 S/N 字节，所有 rank 同时进行：每个 rank 合计 2(N−1)/N · S。

`zerolab.comm.ring_all_reduce` 正是用 `torch.distributed` 的 send 和 recv 这样做的，还能把每一步报告出来。
为了看清谁对什么做了贡献，**rank r 在每一块里的初始值都是 10^r**：1、10、100、1000。这样一个和就能拼出它的贡献者：
从右往左读各位数字，第 k 位是 1，就说明 rank k 的数在里面。1011 是 rank 0、1 和 3；1111 是所有人。

**先预测，再运行。** 在 4 个 rank 上，这个环要走多少步？最后每个 rank 在每一块里持有的是哪个数？
"""),
"ch00-21": ("75ec6b3bc81d", r"""
六步，即 2(N−1)，到处都是 1111：每一块都恰好包含每个 rank 的数各一次。（有人会猜 4 步，一个 rank 一步；
但环要先用 N−1 步求和，再用 N−1 步分发。）表中每一行是一步：所有 rank 同时各自发送不同的块，所以没有哪条链路闲着。

同样的步骤画成图：每一步之后，每个 rank（行）手里的每一块（列）是什么。格子颜色越深，它的和里包含的 rank 越多；
每行里加了边框的那一格，是这个 rank 刚从左边邻居那里收到的块。看 reduce-scatter 期间对角线一格格填满，
再看 all-gather 期间算完的块向外扩散。（`zerolab.course.viz.ring_steps` 根据每个 rank 记录下的步骤画出这些图。）
"""),
"ch00-23": ("9938a9c3da3e", r"""
最后是真正要紧的检查：我们刚才看着它跑的这个环，结果必须与库里的 `dist.all_reduce` **完全**相同，而且恰好发出 2(N−1)/N · S。
每个 rank 取 1000 个随机整数，存成 float64（这样不论按什么顺序相加，和都是精确的），再用一个新的 `Ledger` 数自己发出的每一次 send。

**先预测，再运行。** 张量是 1000 个 float64，S = 8000 字节，4 个 rank。每个 rank 会调用多少次 `send`，一共发出多少字节？
如果 rank 0 持有整个张量，其他 rank 手里都是没用的东西，答案会变吗？先写下你的猜测，再运行这个单元格。
"""),
"ch00-25": ("b8fa9579b957", r"""
每个 rank 都发了六次，每次 2,000 字节，共 12,000 字节：1.5 S，正是账本的公式，这回是一次一次 send 数出来的。答案也不会变：
一次集合通信的通信量只取决于张量的大小和 rank 的个数，与数值无关，所以一个手里“没用”（全是 0）的 rank 发得和别人一样多。

## 本章测得的

* **搬家队**：四个 rank，是同一个 `torch.distributed` 进程组里的真实进程，只启动一次，之后每个单元格都复用。
  每个 rank 都知道自己的 rank、总 rank 数和自己的设备；rank 0，也就是领班，是 broadcast 的源。
* **四种喊话**，数字都能手算核对：**all-reduce** 之后每个 rank 持有 60 + 4·i；**reduce-scatter** 之后 rank r 只持有这个和的第 r 片；
  **all-gather** 之后每个 rank 持有全部各片；**broadcast** 之后每个 rank 持有 rank 0 的那一份。
* **账本**：对 S 字节的张量，all-reduce 时每个 rank 发出 2(N−1)/N · S（N = 4 时为 1.5 S），reduce-scatter 或 all-gather 时发出
  (N−1)/N · S（各 0.75 S），broadcast 时发出 S。一次 all-reduce 的代价恰好等于一次 reduce-scatter 加一次 all-gather，
  ZeRO 关于通信量的结论正是建立在这一点上（第 3 章）。
* **从零实现的环**：2(N−1) = 6 步，每步每个 rank 发一块。一次一次 send 数下来，每个 rank 发了 6 块，8000 字节的张量共发 12000 字节，
  恰好是 2(N−1)/N · S，结果与 `dist.all_reduce` 逐位相同。

## 思考题

1. 把开头的 `N = 4` 改成 2，再改成 8，重新运行。all-reduce 每个 rank 的字节数怎么变？N 增大时它趋近于多少？为什么这让环形算法能够扩展？
2. 在环里，一块的部分和要走多少步才能经过每一个 rank？为什么 reduce-scatter 是 N−1 步而不是 N 步？
3. 账本里，从 rank 0 做一次 broadcast 每个 rank 花 S，比 N = 4 时 all-reduce 的 1.5 S 少。既然如此，在每个 rank 的梯度各不相同时，
   为什么不能用 broadcast 代替 all-reduce？
4. 演示里让 rank r 从 10^r 开始，好让一个和拼出它的贡献者。reduce-scatter 的第 1 步之后，rank 2 在第 3 块里持有什么值？在图里核对一下。

## 轮到你了

打开 [`exercises/zh/00_ring_all_gather.ipynb`](../../exercises/zh/00_ring_all_gather.ipynb)：你只用 `send_recv` 写出环的后一半，
也就是 all-gather；检查程序会在 2、3、4 个真实的 rank 上运行它，并与 `dist.all_gather` 对比。

接下来，第 1 章打开工人们的背包：一个 rank 实际上背着什么，为什么其中最重的不是家具。
"""),
"ex00-00": ("4c0954a8a7ba", r"""
# 练习 0 · 环的后一半：all-gather

一次环形 reduce-scatter 之后，每个工人手里都有户型图里算完的一片。要让每个工人都拿到整张户型图，这些片还得沿环再走一圈：
这就是 **all-gather**。写法和本章一样，每一步都是一次双向收发：`send_recv(send_tensor, recv_tensor)` 把 `send_tensor` 发给右边的邻居
（rank + 1），同时用左边邻居（rank − 1）发来的数据填满 `recv_tensor`。

写出 `ring_all_gather(chunks, rank, world_size, send_recv)`：

- `chunks` 是一个含 `world_size` 个一维张量的列表；开始时只有 `chunks[rank]` 装着这个 rank 的数据，其余都是占位（填满 −1）。
  各块的大小可能相差 1。
- 结束时，每个 rank 上的每个 `chunks[c]` 都必须装着第 c 块的数据。返回 `chunks`。
- 用 N − 1 步，每步发一块。第 s 步时，rank r 手里的哪一块是它右边的邻居还缺的？（第 0 步：它自己那块。）
  用 `torch.empty_like` 照着即将收到的那一块分配接收缓冲区。

*先预测：* N = 4 时，对一个 S 字节的张量，每个 rank 要发出多少字节？
"""),
"ex00-02": ("be7b0b809fdd", r"""
检查程序会在 2、3、4 个真实的 rank 上运行你的函数（所用长度都不是 N 的整数倍），把每一块与 `torch.distributed.all_gather` 的结果对比，
并统计通信量。第 c 块装的是 `1000 · (c + 1) + i`，所以哪一块错了，一看就知道它装的是谁的数据。
"""),
"ex00-04": ("7123c6c156e5", r"""
## 它在 zerolab 里的位置

`zerolab.comm.ring_all_gather` 就是同一个环；stage 1 和 2 在每次优化器更新（optimizer step）之后做一次 all-gather
（每个 rank 收集更新后的各个参数分片），stage 3 则在每一层的前向和反向之前各做一次。

思考题：

1. 每个 rank 发出了张量的 (N − 1)/N。为什么不是全部 N 块？
2. 环形 reduce-scatter 接着环形 all-gather，就是一次 all-reduce。一共多少步？每个 rank 一共发出多少字节？
"""),
}
