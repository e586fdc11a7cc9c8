"""第 13 章「ZeRO 三阶段之外」与练习 13 的中文（tools/build_notebooks/ch13.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。见 tools/build_notebooks/zhsource.py。
"""

ZH = {
"ch13-00": ("92a458da3a32", r"""
# 第 13 章 · ZeRO 三阶段之外：两栋楼里的搬家队与 ZeRO++

*楼梯快，街道慢：少往街上送，送也用速记。*

搬家队大到一栋楼住不下了。一半工人搬到了街对面：同一栋楼里，家具在楼梯上传递，很快；两栋楼之间，什么都得装卡车运，很慢。
Stage 3 的做法还和以前一样（每个工人保管每个房间家具的一份，进房间干活前把其余的借来，干完还回去，每趟结束时把搬迁贴纸汇总），
可现在大部分借还和汇总都要穿过街道。**ZeRO++**（Wang 等，2023，*ZeRO++: Extremely Efficient Collective Communication for Giant Model Training*；DeepSpeed 从 0.10 起支持）
就是少装几车的三个办法：

| 故事里 | 训练中 | DeepSpeed 0.19.8 的配置键 | 在 zerolab 里 |
|---|---|---|---|
| 两栋楼、楼梯、街道 | **节点**（node）：节点内走 NVLink，节点间走 InfiniBand | （启动器给出的节点） | `Crew(4, nodes=2)`、`ledger.by_link()` |
| 用**速记**写家具清单，每箱记一个数，再记一串小整数 | **qwZ**：参数 all-gather 传 int8 的块（block），每块外加一个 fp32 缩放因子（scale） | `zero_quantized_weights` | `gather.py`、`quant.py` |
| 搬迁贴纸用更简的速记，先在楼里汇总 | **qgZ**：梯度以 int4 经过两次 all-to-all（先节点内，再跨节点） | `zero_quantized_gradients` | `reduce.py`（`QuantizedReduce`） |
| 每栋楼再存一份家具副本 | **hpZ**：每个节点存一份参数的二级分片（secondary partition），所以反向收集从不跨节点 | `zero_hpz_partition_size` | `hpz.py`、`gather.py` |

各是谁的行为：配置键、分块量化器（block quantizer）、每次 all-gather 何时量化、那两次 all-to-all，都是 **DeepSpeed 0.19.8 的**
（`runtime/zero/partition_parameters.py` 里的 `CUDAQuantizer` 和 `all_gather_coalesced(..., quantize=True)`，
`runtime/comm/coalesced_collectives.py` 里的 `all_to_all_quant_reduce`，kernel 在 `csrc/quantization/`；hpZ 的二级分片在
`partition_parameters.py` 的 `_partition_param_sec`）；字节比例是**论文的**；一台机器上的虚拟节点和账本里的链路一栏是 **zerolab 自己的**。
DeepSpeed 的量化 kernel 只有 CUDA 版，所以在这颗 CPU 上，zerolab 用 torch 复现它们的算术（`zerolab/zeropp/quant.py`），
每次集合通信都走 `torch.distributed`（gloo）。

论文的核心结论：三者全开时，节点之间传输的量从 ZeRO-3 的 **3M 降到 0.75M**（M 是模型 16 位权重的字节数），
**跨节点通信量约减少到四分之一**（qwZ 把前向收集减半，hpZ 把反向收集留在节点内，qgZ 用 int4 梯度把 reduce-scatter 每个元素的 2 字节降到约半个字节）。
第 14 章在一个大集群上算出同样的比例；在这个由两个小节点组成的搬家队上，我们逐项测量。

**本章要测的：** 开与不开每个选项时，每个 rank 在楼内和跨街各发出多少字节，并与公式并列；每个选项带来的误差，并与其上界对照；
一条损失曲线；以及在真实集群上，`zerolab simulate` 认为每个选项值多少。
"""),
"ch13-02": ("354a6c6f37cb", r"""
布局与 torchrun 一致：节点 *i* 持有 rank *i·k … i·k + k − 1*（这里每个节点 k = 2 个 rank），每个 rank 拿到的 `LOCAL_RANK` 和
`LOCAL_WORLD_SIZE` 与 `torchrun --nnodes 2 --nproc-per-node 2` 下相同。我们的两栋虚拟楼之间并不会更慢（全在同一颗 CPU 上）；
变的是账本：它把每次集合通信记在 **intra**（所有 rank 都在同一节点内）或 **inter**（通信组跨越节点）名下。

## 1. 住在两栋楼里的搬家队

家当：一个小 GPT（2 个 block，宽度 32），bf16，stage 3，和 DeepSpeed 一样逐个参数分区；数据是《爱丽丝梦游仙境》的 75 个字符，补齐到 80 个 token，
好让每个分片都是 8 个元素的整数倍（qwZ 的量化器要求如此）。偏置和 LayerNorm（每个至多 200 个元素）是*常驻参数*（persistent parameters，第 8 章）：完整保留，
每步之后每个都用自己的一次 all-gather 刷新（18 次小调用）。`stage3_max_reuse_distance` 设为 0，**并且关掉了预取**（`stage3_prefetch_bucket_size` 为 0），
所以每个权重在前向收集一次，**在反向再收集一次**，即论文的 3Ψ：hpZ（第 6 节）挪进楼内的，正是这次反向的再收集。换成 DeepSpeed 的默认设置，
这个小模型上就没有可挪的了：它的复用距离 10⁹ 会让模型在前向转反向的拐点处保持收集状态；即使距离为 0，它默认的预取（5·10⁷）
也会把每个权重标记为给反向的使用而取，从而留住它（第 8 章两者都测过）。

每个 rank 运行 `ch13.one_step(keys)`（在 `zerolab/course/chapters/ch13.py` 里）：用这些 ZeRO++ 配置键新建一个引擎，先训练一步
（它记录取参数的顺序，我们留下它的梯度和 qwZ 量化过的每一块），再训练第二步，从账本里读出这一步的集合通信。
"""),
"ch13-04": ("3e2467e8aafd", r"""
**先预测，再运行。** 这里 stage 3 的每次集合通信都是覆盖全部 4 个 rank 的一个环，所以都横跨两栋楼。一步里 rank 0 **在楼内**发出多少字节，
**跨街**又发出多少？要收集的权重共 Ψ_g = 28,160 个元素，常驻参数 896 个，都是 bf16（2 字节）；环形算法里，每个 rank 发出集合通信张量的
(N−1)/N（第 0 章）。把你的猜测写下来。
"""),
"ch13-06": ("e66f4930a765", r"""
**没有一次通信留在楼内。** 每次集合通信的通信组都是全部四个 rank，所以账本把它们全记在 *inter* 名下：参数收集、梯度的 reduce-scatter，
连梯度范数那次 8 字节的 all-reduce（只有一次 fp64 求和，因为 bf16 下 DeepSpeed 的 stage 3 不发溢出标志）也不例外。每个模块的权重是一次调用，
前向一次、反向再一次：共 22 次，外加 18 次常驻刷新。token 嵌入层（2,560 个元素）**多收集了两次**：GPT 的输出头与它共享同一个权重矩阵，
所以前向为嵌入层收集它一次，为输出头再收集一次；反向为输出头的反向收集它一次，为嵌入层自己的反向再收集一次。DeepSpeed 在每个模块的反向之后
释放它的参数（`runtime/zero/parameter_offload.py` 里的 `post_sub_module_backward_function`），复用距离为 0、又不预取时什么也不保留；
随后 DeepSpeed 的反向前钩子（pre-backward hook）为下一个模块收集它的全部参数，连嵌入层也不例外，尽管嵌入层的反向根本不读权重。
（DeepSpeed 默认的复用距离会让它从一次使用一直保留到下一次：见问题 1。）

账本的 *inter* 一栏对真实网络意味着什么：它是这个 rank 在环上发出的字节，每个张量的 (N−1)/N。跨两个节点的环进出每个节点各一次，
所以一个 rank 发出的，也就是一个**节点**的网卡要承载的（第 14 章的模型，那里节点的 β 是它整个网络的带宽）。在集群上，
这些字节走 InfiniBand，速度只有 NVLink 的十分之一甚至更低（数字见第 14 章）：多节点上的 stage 3，快慢取决于最慢的那条街。

## 2. qwZ：用速记写家具清单

打开 `zero_quantized_weights` 后，DeepSpeed 的 stage 3 会量化每一次参数 all-gather，无论前向还是反向、是否预取
（`all_gather_coalesced(..., quantize=True)`）：每个 rank 把自己的分片转成 fp16，切成若干**块**（块数由 DeepSpeed 的
`CUDAQuantizer` 决定，每块是 8 个元素的整数倍，目标是接近 8,000 个元素；见 `quant.qwz_groups`），然后每块发送**一个 fp32 缩放因子**
和**每个元素一个 int8 值**，共两次 all-gather，先发值，再发缩放因子。每个 rank 把收到的数据反量化（dequantize）为 fp16，再转成模型的数据类型。
分片本身和 fp32 主权重从不量化：量化的只是前向和反向所用的那份副本。每步之后常驻参数的刷新也不量化（DeepSpeed 的 `_post_step`
用一次普通的 all-gather 收集它们）。

**先预测，再运行。** 模型的数据类型是 bf16，每个元素 2 字节。开 qwZ 后，参数 all-gather 要多少字节：正好一半、比一半略多，还是更少？
在这里每个分片只有一块，一个缩放因子要花多少？
"""),
"ch13-08": ("a776aae0a13f", r"""
**一半，再加上缩放因子。** 每个元素 1 字节，而不是 bf16（或 fp16）的 2 字节：0.5×。缩放因子每块 4 字节；DeepSpeed 的块最多 8,000 个元素
（它的量化器断言块小于 16,000），所以在真实模型上它们只多出约 4/8,000 = 0.05%。这里每个 rank 在一次收集中的分片就是一块，缩放因子每次收集占 16 字节（4 个 rank × 4 字节），
一共 22 次收集，收的都是小权重，所以比例是 0.5029。（如果模型保持 fp32，不开 qwZ 时每个元素收集 4 字节；qwZ 先转 fp16 再转 int8，所以只发约四分之一。）
梯度（reduce-scatter）不受影响：这一步的字节数减少三分之一，而不是一半。

**速记的精确规则**（DeepSpeed 的对称量化器，`csrc/includes/quantization_utils.h`）：对一个最大绝对值为 *m* 的块，`q_scale = 2⁸ / (2m)`；
每个值变成 `q = clamp(round(x · q_scale), −128, 127)`（四舍六入五成双，round half to even），传输的是 `scale = 1 / q_scale = m / 128`。接收方算出
`x' = q · scale`。所以每个值还原后的误差都在半个量化步长之内，即 **scale/2 = m/256**：块内最大权重的 0.4%。

**先预测，再运行。** 是不是每个权重都在半个步长之内？一块里哪个元素还原得最差，差多少？
"""),
"ch13-10": ("c0c0e667c875", r"""
误差呈锯齿状，在 ±½ 个步长之间来回；唯一的例外在左图的最右端：块里**最大的正**权重落在 128 个步长上，int8 装不下，被截断到 127，
少了整整一个步长（最大的*负*权重恰好落在 −128 上）。所以上界是：**每块除一个权重外都在 scale/2 之内，那一个在一个 scale 之内**，
即 m/256 和 m/128。前向所用的权重带着这个误差；优化器的 fp32 主权重从来不带，所以误差不会一步步累积下去。

## 3. qgZ：4 bit 的搬迁贴纸，先在楼里汇总

打开 `zero_quantized_gradients`（并且不止一个节点，DeepSpeed 只在这时才用它）后，stage 3 把每个梯度的 reduce-scatter 换成
DeepSpeed 的 `all_to_all_quant_reduce`：

1. 每个 rank 把它的梯度量化为 **int4**（每字节两个值），每块一个 fp32 缩放因子；
2. 一次**节点内的 all-to-all**：本地 rank（local rank）*j* 从本节点的每个 rank 那里，收下梯度中归它自己、以及归其他节点上同号 rank 负责的那几部分；
3. 反量化，把本节点的各份相加，再把和量化成 int4；
4. 在本地 rank 相同的那些 rank 之间做一次**跨节点的 all-to-all**：每个 rank 收到属于自己的分区，其中的值已在每个节点内求过和；
5. 反量化，把各节点的和相加，再除以节点数。

一维参数（偏置、LayerNorm：这里就是常驻参数那一组）和 DeepSpeed 一样，退回普通的 reduce-scatter。大小不是 **2N** 的整数倍的梯度也一样
（每字节两个 int4 值，再分成 N 份）：DeepSpeed 打一条警告，用 bf16 对它做 reduce-scatter（`runtime/comm/coalesced_collectives.py`
的 `all_to_all_quant_reduce`，第 43-52 行），zerolab 也这样做（`zerolab/zeropp/qgz.py`）。如果模型的张量大小不是 2N 的整数倍，
这些梯度就悄悄失去了 qgZ 的节省：开 qgZ 时账本里的 reduce-scatter 会显示出来。

**先预测，再运行。** 对一个 M 个元素的梯度，reduce-scatter 每个 rank 发出 3/4 · 2M 字节，全部跨街。开 qgZ 后，一个 rank 在楼内发出多少字节，
跨街发出多少？（先忽略缩放因子：int4 是半个字节。）
"""),
"ch13-12": ("38e181240471", r"""
对 M 个元素的梯度：楼内 (L−1)/L · M/2 字节（int4），跨街 (K−1)/K · M/(2L)，其中每个节点 L = 2 个 rank，共 K = 2 个节点，
即 M/4 和 M/8，而 reduce-scatter 是 3M/2，全部跨街。一个**节点**发出的是一个 rank 跨街量的 L 倍，(K−1)/K · M/2：
在这里只有环形 reduce-scatter 经过节点网卡的字节的六分之一；在大集群上则是 Ψ 的 0.5·(m−1)/m 对 2·(N−1)/N（第 14 章的表）。
缩放因子每块一个 fp32，而 DeepSpeed 给梯度分的块很小（形状为 (a, b) 的二维参数被切成 max(a, b, N) 块），所以在这里它们占 qgZ 字节数的五分之一；
在宽模型上，它们是每个元素 4/`hidden` 字节。另外，qgZ 每个梯度要 4 次调用，而不是占一个桶的一部分：在 CPU 上，它的时间主要就花在这里
（benchmarks/zeropp_quant.py 测了这一点）。

**先预测，再运行。** 第 5 步把和除以*节点*数。reduce-scatter 除以的是 *rank* 数，N = 4。与精确运行相比，qgZ 的梯度会是多少：一样、一半，还是两倍？
"""),
"ch13-14": ("55a1f06c68ef", r"""
**是平均值的两倍**，正如警告所说。DeepSpeed 0.19.8 的 qgZ 把全部 N 个 rank 的梯度加起来，却只除以 K 个节点，所以它的梯度是
reduce-scatter 结果的 N/K = L（每个节点的 rank 数）倍；而仍走 reduce-scatter 的一维参数得到的是真正的平均值。zerolab 有意复现这一点
（账本和数值都必须与 DeepSpeed 一致），并给出警告。谁会受影响：**Adam** 几乎不受影响（它的更新量要除以梯度自身的尺度），
**梯度裁剪**（gradient clipping）和**报告的梯度范数**会受影响（这里范数变大，但不到 2 倍：二维参数组的梯度翻了倍，一维参数组的没有，其中包括 LayerNorm 那些较大的梯度），
SGD 的步长也会受影响。除了尺度之外，int4 还损失精度：两次量化各让每个值最多偏差半个步长（步长为 m/8），总误差在这里约为梯度范数的十分之一。

## 4. 损失曲线

**先预测，再运行。** 在《爱丽丝梦游仙境》上训练 20 步，4 个 rank 分住 2 栋楼：精确运行；同一次运行，但把每个 ZeRO++ 配置键都显式写成 `false`；qwZ；qgZ。
哪些曲线会完全相同？其余的会差多远？
"""),
"ch13-16": ("12991b154bca", r"""
所有配置键都写成 `false` 时，运行与精确运行**逐位相同**：同样的集合通信、同样的顺序、同样的权重。qwZ 与精确曲线的差距在千分之几以内；
qgZ 的梯度只有 4 bit，翻倍的梯度还要经过梯度裁剪，所以偏得更远，但学得一样好。容差（每一步的损失差 0.02 和 0.08）是经验值，
约为在这个模型上观察到的差距的四倍（误差经过 Adam 之后就没有闭式上界了），`tests/test_zeropp_engine.py` 在更短的运行上用了更严的容差。
真正要紧的检验是真实模型上的成千上万步：论文报告，在最大 13B 的 GPT 模型上（qwZ、hpZ、qgZ 一起开），收敛与精确运行相同。

## 5. 什么时候用哪个

| 选项 | 削减什么 | 代价 | 何时使用 |
|---|---|---|---|
| qwZ（`zero_quantized_weights`） | 前向和反向的参数 all-gather：每个元素 2 → 1 字节（每约 8,000 个元素 +4 B） | 前向/反向所用权重每块最多偏差 m/256；每次收集多一次量化和一次反量化 | 跨节点的 stage 3，且参数收集占通信量的大头时 |
| qgZ（`zero_quantized_gradients`） | 离开每个节点的梯度：Ψ 的 2·(N−1)/N → 0.5·(m−1)/m | int4 误差；每个梯度 4 次调用；在 0.19.8 中梯度是平均值的（每节点 rank 数）倍（影响裁剪、范数、SGD） | 不止一个节点、网络较慢时；要重新调梯度裁剪 |
| hpZ（`zero_hpz_partition_size` = 每节点 rank 数） | 反向的参数收集：留在节点内 | 一份二级分片，每个 rank 多占 2Ψ/k 显存 | 显存有富余、网络较慢时 |
| 都不用 | | | 只有一个节点（NVLink 很快；qgZ 在那里什么都不做），或每张 GPU 的 token 足够多，能把通信藏住（第 14 章） |

在一个节点内，这些都帮不了多少：楼梯本来就快。要问的是每个选项在**你的**那条街上能省多少。`zerolab simulate`（第 14 章）用公开的数据回答这个问题。

**先预测，再运行。** 70B 模型，64 张 H100，每节点 8 张，每张 GPU 一条 4,096 token 的序列：在 DGX H100 的网络上（每节点八个 400 Gb/s 端口）
和在“细”网络上（每节点只有一个端口），哪个从 ZeRO++ 获益更多？有没有哪种组合能把通信藏住？
"""),
"ch13-18": ("6085336a9ad5", r"""
在 DGX 网络上，stage 3 本来就藏得住：通信只占计算的四分之一，T* 只有四分之一条序列，所以 ZeRO++ 在那里几乎换不来什么，只会带来误差。
在单网口集群上，普通运行需要的 token 约为现有的两倍；单开 qwZ 或 qgZ 都不够，两个一起开才能把通信压到计算之下。街道是瓶颈的地方，
ZeRO++ 是最便宜的解法；不是瓶颈的地方，它只会增加误差。（最后几行加上了模拟器对 hpZ 的公式；下一节实测它。）
第 14 章从 8 张到 1,024 张 GPU、连同卸载，手算了这些数字。

## 6. hpZ：每栋楼再存一份副本

设 `zero_hpz_partition_size` = k（每个节点的 rank 数）后，每个工人除了保管每个房间家具的 1/N 之外，还在**自己这栋楼里再保管一份**：
每个被收集模块的 1/k，用参数的数据类型存放。DeepSpeed 0.19.8 每当一个模块在收集后被释放时（以及初始化时一次），就从完整的模块里切出这份二级分片，
并在每次没有被跳过的优化器更新时丢掉它。模块有二级分片时，它的 all-gather 就**在节点内**、在 k 个 rank 上进行：反向的再收集总是如此（这里关掉预取、复用距离为 0，每个权重都要再收集；
如果配置让权重留到反向，就没有可挪的了）；
第一步的前向也是；梯度累积下之后各个微步的前向同样如此（`partition_parameters.py`、`_partition_param_sec`；这些规则连同它们在 DeepSpeed 里的文件出处写在
`zerolab/zeropp/hpz.py` 里，DeepSpeed 的通信组由 `benchmarks/ds_reference/ds_hpz.py` 在它的 CPU 版上实测）。梯度仍在全部 N 个 rank 上做
reduce-scatter：主权重和优化器状态仍按 ZeRO-3 的方式存放。

**先预测，再运行。** 同一支搬家队，`zero_hpz_partition_size` 设为 2，一个稳态的步。被收集的权重是 Ψ_g = 28,160 个 bf16 元素，
共享的 token 嵌入层（2,560）在前向被收集两次，在反向也被收集两次。rank 0 的参数 all-gather 会跨街发出多少字节，在楼内发出多少？在反向和优化器更新之间，
每个 rank 多占多少内存？
"""),
"ch13-20": ("9e6110467092", r"""
反向的参数收集离开了街道：它们在一栋楼的两个 rank 之间进行，每次发出模块字节数的一半，而不是四分之三，而且一点也不跨街，
token 嵌入层的那两次（先为输出头，再为嵌入层自己）也在其中。
前向仍在全部四个 rank 上收集（二级分片在上一步被丢掉了），只有 token 嵌入层在前向的第二次收集例外：它第一次被释放时就生成了二级分片，
所以输出头的那次收集留在了楼内。代价是二级分片：从一个模块第一次被释放到优化器更新这段时间里，每个 rank 多占 2Ψ_g/k 字节（论文的 2Ψ/k）。
再叠加上 qwZ 和 qgZ，每步跨街的量约为普通 stage 3 的五分之一：前向的收集用 int8，梯度用 int4。

FSDP2 的混合分片（hybrid sharding，HSDP）用另一种办法应对这条慢街：在节点内分片、在节点间复制，所以只有梯度的 all-reduce 要跨街，
但每个参数、梯度和优化器状态都要存 N/k 份。`benchmarks/hsdp_vs_hpz.py`（英文 README.md 的“hpZ beside FSDP2's hybrid sharding (HSDP)”一节）
在一支这样的搬家队上把两者都测了一遍。

## 本章测得的
"""),
"ch13-22": ("234a718e920a", r"""
- 住在多个节点里的搬家队：stage 3 里每次覆盖全部 rank 的集合通信都要穿过街道；账本把它记在 *inter* 名下，一个 rank 在环上发出的字节就是它所在节点的网络要承载的。
- **qwZ** 发送 int8 值，外加每块（至多约 8,000 个元素）一个 fp32 缩放因子：bf16（或 fp16）收集量的 0.5×，再加 0.05%；
  前向和反向所用的每个权重最多偏差 scale/2 = m/256（被截断的块内最大值为 m/128）；主权重保持精确。
- **qgZ** 把梯度量化为 int4，通过两次 all-to-all 归约，先节点内、再跨节点：离开一个节点的量从 Ψ 的 2·(N−1)/N 降到 0.5·(m−1)/m，再加缩放因子。
  在 DeepSpeed 0.19.8 中，它的梯度是平均值的（每节点 rank 数）倍：梯度裁剪和报告的范数都会看到这一点。
- ZeRO++ 的配置键全关时，运行与普通 stage 3 逐位相同；在一次短运行中，qwZ 和 qgZ 都在各自的容差之内。
- **hpZ** 在节点内为每个被收集的模块保留一份二级分片：反向的收集（以及梯度累积下之后各微步的前向）不再上街，代价是直到优化器更新前每个 rank 多占 2Ψ/k 字节。
- 三者合起来，在大集群上把节点之间的通信量降到约四分之一（论文的 3M → 0.75M，见第 14 章的表）；一维梯度和大小不是 2N 整数倍的梯度
  退回 bf16 的 reduce-scatter。
- ZeRO++ 在节点间网络是瓶颈的地方才划算（第 14 章算出何时如此）。

## 思考题

1. 用 DeepSpeed 默认的复用距离重跑第 2 节：`crew.run(one_step,
   {"zero_quantized_weights": True, "stage3_max_reuse_distance": 10**9})`。哪些 all-gather 消失了？qwZ 的比例变了吗？
2. qwZ 的缩放因子：一个隐藏维度 4,096 的 7B 模型跑在 64 张 GPU 上，一个 4,096 × 4,096 权重在一个 rank 上的分片有多少个元素？
   `quant.qwz_groups` 把它切成几块？缩放因子多出百分之几？
3. 用 `zerolab.Crew(4, nodes=4)`（每个节点一个 rank）重跑第 3 节。现在警告说了什么？qgZ 的梯度与平均值相比如何？为什么？
4. 为什么 DeepSpeed 把梯度量化到 4 bit，权重却量化到 8 bit？（想想各自的误差去了哪里：进入一步的更新并经过 Adam，还是进入每一层的前向。）
5. 你的集群只有一个 8 张 GPU 的节点。你会打开哪个 ZeRO++ 选项？为什么？

**轮到你了：** 在 [`exercises/zh/13_block_quantizer.ipynb`](../../exercises/zh/13_block_quantizer.ipynb) 里，你按 DeepSpeed kernel 的算法，
写出 qwZ 的分块量化器，即量化和反量化两个函数。检查先单独在能暴露常见错误的张量上运行你的实现，然后把它放**进引擎里**，作为 qwZ all-gather 的量化器，
在分住 2 栋楼的 4 个 rank 上与 zerolab 的实现并排运行。
"""),
"ex13-00": ("5782262301a0", r"""
# 练习 13 · 速记：qwZ 的分块量化器

*每箱记一个数，每件记一个小整数：而且每个工人都得用同一种读法。*

在第 13 章，搬家队用速记传家具清单：qwZ 的 all-gather 传的是 int8 值，外加每块一个 fp32 缩放因子。这里由**你来写这个量化器**（quantizer），
也就是 DeepSpeed 0.19.8 的 CUDA kernel 计算的那两个函数（`csrc/quantization/quantize.cu`、`dequantize.cu`，
`csrc/includes/quantization_utils.h` 里的对称类型）。检查先在专门挑来暴露常见错误的张量上，把你的实现与 zerolab 的版本（`zerolab.zeropp.quant`）比较，
然后把你的实现接进引擎（`zerolab.zeropp.quant.use_qwz_codec`），作为 qwZ all-gather 的量化器，在 4 个 rank（2 个节点，每节点 2 个）上运行，
比较字节数、前向看到的权重和损失。

**检查失败时**，它会说明期望什么、你给出了什么，并给一条指出可能错误的提示。想同时看到完整的回溯，先运行
`import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，再重新运行检查单元格。
"""),
"ex13-02": ("1f2803634c18", r"""
## 1. 量化

    quantize(x, groups, bits=8) -> (q, scales)

- 把 `x` 展平来读（任意形状、任意浮点数据类型：引擎交给你的是一个 fp16 分片），切成 `groups` 个等长的**连续**块（`x.numel()` 是 `groups` 的整数倍）。
- 用 **float32** 计算。对每一块，`m` 是它的最大绝对值，`q_scale = 2**bits / (2 * m)`；`m == 0` 时取 1.0。
- `q = clamp(round(x * q_scale), -2**(bits-1), 2**(bits-1) - 1)`，四舍六入五成双（round half to even），与 `torch.round` 一致（即 kernel 里浮点到整数的转换），
  存成 **int8**，展平，每个元素一个。
- `scales` 是每块的 `1 / q_scale`，**float32**，每块一个：DeepSpeed 存储并发送的就是它。

DeepSpeed 的 qwZ 以 `bits=8` 调用它；qgZ 以 `bits=4` 调用同一个 kernel（检查两种都会试）。
"""),
"ex13-04": ("1ba35c8ecd22", r"""
**先预测，再运行。** 一块，`bits=8`：`[1.0, -0.5, 0.25, 0.0, -1.0, 0.3, 0.7, 0.999]`。它的缩放因子是多少？1.0 得到哪个 `q`，-1.0 得到哪个？
把你的猜测写下来，然后运行。
"""),
"ex13-06": ("465bf398a75c", r"""
这一块的最大绝对值是 1.0，所以一个步长是 1/128。−1.0 是 −128 个步长，int8 装得下；+1.0 是 +128 个，装不下：被截断到 127。
这就是为什么每块会有一个值还原后差整整一个步长。

## 2. 反量化

    dequantize(q, scales) -> values

逐块计算 `q * scale`（`q` 的第 *b* 块是第 *b* 段连续的 `q.numel() // len(scales)` 个值），结果是一个展平的浮点张量。
"""),
"ex13-08": ("08c484efc0ef", r"""
**先预测，再运行。** 对一个类似权重的张量（1,024 个值，4 块）做一次量化再反量化：最大误差有多大？以每块的缩放因子为单位。
"""),
"ex13-10": ("f9aa7220f5a9", r"""
## 3. 检查

先单独检查你的两个函数，用八个张量：一个 fp16 分片、各块最大绝对值相差若干个数量级的张量、一个二维张量、最大值为正的块、
恰好落在两个步长正中间的值、一个全零的块、int4，以及许多小块。然后放进引擎：一个小 GPT，stage 3，bf16，开 `zero_quantized_weights`，
4 个 rank 分成 2 个节点、每节点 2 个，你的量化器用在 qwZ 的 all-gather 里训练 3 步，并与使用 zerolab 量化器的同一次运行、以及不开 qwZ 的运行并排比较。
大约半分钟。
"""),
"ex13-12": ("86ddbb5ac661", r"""
## 它在 zerolab 里的位置

`zerolab/zeropp/quant.py` 里有量化器（`quantize`、`dequantize`）、DeepSpeed 决定块数的规则（`qwz_groups`），以及 qgZ 用的 int4 打包（`pack_int4`）；
`zero_quantized_weights` 打开时，`zerolab/zero/stage3/qwz_gather.py` 的 `all_gather_quantized` 在 stage 3 的每次 all-gather 里调用它们，
qgZ 则由 `zerolab/zeropp/qgz.py` 的 `QuantizedReduce` 调用。`quant.use_qwz_codec` 是 zerolab 自己的钩子，让检查能把你的实现放到那里。

思考题：

1. 你的 `quantize` 从不关心数据会以什么类型发送。“字节减半”从何而来？如果模型保持 fp32，qwZ 会发送多少？
2. 块数来自 DeepSpeed 的 `qwz_groups`：每块是 8 的整数倍，接近 8,000 个元素。如果每块 64 个元素，缩放因子要多花多少？误差上能得到什么？
"""),
}
