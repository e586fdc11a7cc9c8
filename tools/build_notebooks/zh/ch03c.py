"""练习 3c「亲手写 ZeRO-1」的中文（tools/build_notebooks/ch03c.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。英文改动后哈希对不上，
tests/test_zh_edition.py 会点名该单元格；改好中文后运行
``python tools/build_notebooks/zh_edition.py --accept <单元格 id>``。
"""

ZH = {
"ex03c-00": ("1156d2906ace", r"""
# 练习 3c · 亲手写 ZeRO-1：只用 `torch.distributed` 实现分片优化器

第 3 章里，队长把厚厚的小本子撕成了 N 份。小本子就是**优化器状态**（optimizer states）：对每件家具，Adam 记着两行它最近怎么挪动的记录
（动量和方差，momentum 和 variance），混合精度下还有一份精确记下它位置的登记簿（fp32 主权重，master weights）。
现在每个工人**只保管自己那几页**。每一趟搬完，搬家队把搬迁贴纸（**梯度**，gradients）汇总起来，每个工人更新自己那几页所记的家具，
再把新位置喊给大家，这样下一趟出发前，每个人手上那份家当（**参数**，parameters）又完全一样了。

在第 3 章的练习里，你写的是一些零件，由 zerolab 的引擎接进去。这一次你要只用 `torch.distributed` 搭出整套机制：一个类
`ShardedOptimizer`，它包装任意一个 torch 优化器，只为本 rank 负责的那一片参数保留优化器状态。这就是 ZeRO stage 1
（论文里的 P<sub>os</sub>），也就是 DeepSpeed 的 `DeepSpeedZeroOptimizer`（`deepspeed/runtime/zero/stage_1_and_2.py`）干的活。
检查程序在 2 个和 3 个真实的 rank 上，把你的类和 PyTorch 的 `DistributedDataParallel`（DDP）并排运行，要求参数**逐位相同**
（如果差别只来自求和顺序，它会明说，并接受一个写明的容差）。

**检查不通过时**，它会用几行话说明哪里错了，并点出可能的错误；想看完整的回溯，运行
`import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，再运行一次检查单元格。
"""),
"ex03c-01": ("87c339a649f0", r"""
## 设计：一块扁平缓冲区，切成 N 个等大的分片

把优化器的活分给 N 个 rank，有两种办法：

- **按整个参数分给各 rank**，像 PyTorch 的 `ZeroRedundancyOptimizer` 那样：rank r 更新分配给它的那些张量。分片和张量一样大小不均
  （一个 embedding 就可能占半个模型），而且每个张量都要单独一次集合通信；
- **一块扁平缓冲区**（flat buffer），像 DeepSpeed 的 stage 1 和 2 那样：把所有可训练参数首尾相接排进一块一维缓冲区，用零补齐
  到 N 的整数倍，再切成 N 个等大的分片。rank r 负责第 r 片，不管它切过了哪些张量。每个 rank 恰好保留 1/N 的状态，
  而对整块缓冲区（或者像 DeepSpeed 那样，对它的一个个桶）做一次集合通信就能同时照顾到所有张量。

你要搭的是 DeepSpeed 的做法：这样它的显存数字、它的集合通信和它的代码（`bit16_groups_flat`、`single_partition_of_fp32_groups`）
就都是你熟悉的了。DeepSpeed 补齐到 2N 的整数倍，好让每个 16 位的分片都从 4 字节边界开始；fp32 下补到 N 的整数倍就够了。

你的类在每个 rank 上要做的：

1. `__init__(params, optimizer_cls, **kwargs)`：展平、补齐，把本 rank 的分片复制到一个单独的张量里（DeepSpeed 的 fp32 主权重分区）；
   构建 `self.optimizer = optimizer_cls([shard], **kwargs)`。它的状态只为这个分片而存在。
2. `step()`，在 `loss.backward()` 之后调用，这时每个参数的 `.grad` 里是**本 rank** 的梯度（来自它自己那几行 batch）：
   用同样的方式展平梯度，像 DDP 那样在各 rank 间求平均，让本 rank 最后得到自己分片的平均梯度；把它设为分片的 `.grad`；
   `self.optimizer.step()`；把每个更新后的分片发给每个 rank；把整块缓冲区复制回各个参数。
3. `zero_grad()`：清掉每个参数的 `.grad`。

集合通信由你来选（用 torch 2.13 的名字；2.13 之前，第一个和最后一个叫 `reduce_scatter_tensor` 和 `all_gather_into_tensor`）：

| 调用 | 每个 rank 最后得到 |
|---|---|
| `dist.reduce_scatter_single(out, buf)` | `out`：`buf` 在各 rank 上之和的第 `rank` 块（N 个等大的块） |
| `dist.all_reduce(buf)` | `buf`：各 rank 上的和，完整的 |
| `dist.all_gather_single(out, shard)` | `out`：每个 rank 的 `shard`，按 rank 顺序排列 |

请写成 `dist.<name>(...)` 的形式来调用：检查程序是这样计数的。
"""),
"ex03c-04": ("abb00ab26f29", r"""
## 在 2 个 rank 上运行，与 DDP 并排

`zerolab.Crew(2)` 启动两个进程，组成一个 gloo 进程组；`crew.run(fn, ...)` 在每个 rank 上运行 `fn`，返回结果列表，下标就是 rank。
下面的 rank 函数用 AdamW（betas (0.8, 0.95)，权重衰减 0.1）把检查用的模型（一个 5,573 个参数的小 MLP：既不是 2 也不是 3 的倍数）
训练 3 步，每个全局 batch 12 行，每个 rank 用自己那几行。它要么用你的优化器训练，要么用 DDP 加 torch 的 AdamW 训练，后者是参照。
`zero1.counting()` 在运行期间包装该 rank 上 `torch.distributed` 的集合通信，记下 `count.on` 为真时的每一次调用：这里就是 `step()` 里的那些。

**先预测，再运行。** 你的 rank 和 DDP 的 rank 从同样的参数出发，看到同样的数据行。3 步之后，你的参数和 DDP 的参数是逐位相同，
还是只在舍入误差以内相同（你的优化器更新的是一个扁平分片，DDP 的更新六个张量；你的梯度走 reduce-scatter，DDP 的走 all-reduce）？
"""),
"ex03c-06": ("aa27cdcf2fa7", r"""
## 分片省下了什么

**先预测，再运行。** torch 的 AdamW 为它更新的每个张量保留两个同样大小的 fp32 张量（动量和方差）和一个 4 字节的 step 计数器。
模型有 Ψ = 5,573 个参数，分在 6 个张量里；N = 2 时，你的缓冲区把它们补齐到 Ψ' = 5,574。你的每个 rank 持有多少字节的优化器状态？
DDP 的每个 rank 呢？把两个数都写下来。
"""),
"ex03c-08": ("75ae34801730", r"""
一半，精确到字节。`zero1.state_bytes` 称的是每个状态张量背后的内存（`t.untyped_storage().nbytes()`，同一块存储只算一次），
而不是张量自身的大小：从更大的缓冲区里切出来的一片是视图（view），它会让整块缓冲区一直留在内存里。检查程序也用同样的办法称你更新的分片
和它的 `.grad`，所以从扁平缓冲区里切出分片却没有 `.clone()`，每个 rank 上都会按整块缓冲区的大小算。fp32 下，AdamW 的状态每个参数
8 字节；论文里每个参数 12 字节，还算上了 fp32 主权重，混合精度在 16 位参数之外需要这样一份副本。你的类也保留了这样一份副本，但只有自己的分片：
它所更新的那个每元素 4 字节的 `self.shard`（即使在 fp32 训练中，DeepSpeed 也会克隆一份 fp32 分区）。所以 N = 2 时，每个 rank 优化器这一侧
重 12Ψ'/N = 33,444 字节，而 DDP 的是 8Ψ = 44,584 字节再加上计数器，而且差距随 N 增大。参数和梯度在每个 rank 上仍是完整的，
这就是 stage 1（第 3 章：混合精度下 4Ψ + 12Ψ/N）。
"""),
"ex03c-09": ("87b2ef0c6362", r"""
## 分片在通信上的代价

**先预测，再运行。** 一次 `step()` 里每个 rank 发出多少字节？按第 2 章的环形算法计数：对 S 字节的缓冲区，reduce-scatter 或
all-gather 每个 rank 发出 (N−1)/N · S，all-reduce 发出 2(N−1)/N · S。这里 S = 4 × 5,574 = 22,296 字节。DDP 对它 22,292 字节的梯度做
all-reduce，又是多少？
"""),
"ex03c-11": ("c97bb8e872cc", r"""
用一次 reduce-scatter 加一次 all-gather，stage 1 的通信量和 DDP 一样（多出的 4 个字节是补齐）：一次 all-reduce *本来就是* 一次
reduce-scatter 接一次 all-gather（第 2 章），ZeRO 只是把优化器更新挪到了两半之间。这就是论文的说法，每个 rank 2Ψ。DeepSpeed 0.19.8
在 stage 1 和 2 并没有这样做：默认设置下，它对每个梯度桶做 all-reduce，每个 rank 留下自己负责的那几段（`stage_1_and_2.py` 里的
`average_tensor`，配合 `use_multi_rank_bucket_allreduce`），然后再对参数做 all-gather，共 3(N−1)/N · S，是 DDP 的 1.5 倍。
如果你选了 all-reduce，上面那一行会显示出来。
"""),
"ex03c-12": ("11873d015aeb", r"""
## 3 个 rank 时还能逐位相同吗？

**先预测，再运行。** 在 3 个 rank 上，你的参数还和 DDP 的逐位相同吗？掂量三件事：1/3 在二进制里不精确（DDP 的 reducer
把每个梯度乘以舍入后的 1/N，而 torch 的 `allreduce_hook` 和 DeepSpeed 是除以 N）；三个浮点数的和取决于相加顺序；而且原样使用的 DDP
在第一步之后会按梯度到达的顺序（最后一层在前）重新装桶。这个单元格把你的运行和三个 DDP 对比。一个原样使用，另两个保持第一次的桶布局
（即参数自身的顺序：`find_unused_parameters=True` 就有这个效果），其中一个在求和前乘以 1/3，另一个在求和前除以 3。
"""),
"ex03c-14": ("d2411f73fbff", r"""
两种舍入，两种顺序。**除法**：DDP 的 reducer 在把每个梯度复制进桶时乘以 1/N（实测 × 1/3 能逐位复现它，÷ 3 不能）；torch 的
`allreduce_hook` 是除以 N，尽管它的文档字符串说自己与 DDP 一致；DeepSpeed 也是除（`average_tensor` 里的 `tensor.div_(world_size)`）。
N = 2 时两者一致：减半是精确的。**顺序**：gloo 的环把元素 i 的三份贡献按什么顺序相加，取决于 i 落在缓冲区的哪个三分之一里
（第 2 章的环——每一块的和最终停在负责它的 rank 上）。缓冲区布局相同，顺序就相同；DDP 的第二种布局（最后一层在前）把许多元素挪到了另一个
三分之一里。按参数顺序排列、补齐到 N 的扁平缓冲区，得到的每一位都和 DDP 第一种布局的相同；所以检查程序拿你和保持第一种布局的 DDP 对比，
两种舍入方式各比一次。在 2 个 rank 上，这些都无关紧要：a + b 就是 b + a，减半又是精确的，所以第一次运行能对上。

AdamW 随后会把最后几位放大到看得见：一个梯度几乎相互抵消的元素，不管梯度多大，它都会把这个元素挪动 lr 的一部分（附录 3a），
所以差别可能涨到接近 lr/10，而 SGD 的差别一直停留在一个舍入步。

## 检查

它在 2 个 rank 上（先是动量 0.9 的 SGD，再是 betas (0.8, 0.95)、权重衰减 0.1 的 AdamW）和 3 个 rank 上（同样这两个）运行你的类，
各训练 3 步，在同样的数据上与 DDP 对比；统计你在 `step()` 里的集合通信，并称一称你的优化器状态有多重。在 2 个 rank 上，它要求参数与 DDP
逐位相同；在 3 个 rank 上，要求与 DDP 的某一种舍入方式（第一种布局）逐位相同，否则就接受一个写明的容差并说明原因（另一种求和顺序）。
参数不一致时，它会看差在哪里（每次更新都是 DDP 的两倍？有元素从来没动过？各 rank 之间不一致？），并点出可能的错误。
"""),
"ex03c-16": ("b27506b705c3", r"""
## 它在源码里的位置

在 DeepSpeed 0.19.8 里（`deepspeed/runtime/zero/stage_1_and_2.py`，类 `DeepSpeedZeroOptimizer`）：扁平缓冲区是 `bit16_groups_flat`
（每个参数组一块，由 `align_dense_tensors` 补齐到 2N 的整数倍）；模型的参数是它的视图，所以 all-gather 直接写进参数里，
省掉了你做的那次复制；分片是 `single_partition_of_fp32_groups`，被包装的优化器的参数组里只有它；`average_tensor` 对每个梯度桶先除再
all-reduce；`all_gather_dp_groups` 在更新之后收集各个分区。在 zerolab 里，同样的三步分别是 `zerolab/memory/flat.py`（缓冲区和 `shard_range`）、
`zerolab/zero/reduce.py`（各个桶）和 `zerolab/zero/params.py`（`ReplicatedParams.publish`，即 all-gather）。

## 思考题

1. 你的类每步在反向传播之后调用一次 reduce-scatter。DeepSpeed 是一个桶一个桶地归约，开了 `overlap_comm` 时还在反向传播期间进行。
   这在 GPU 上能换来什么？为什么 stage 1 这样做也释放不了任何梯度显存（stage 2 会怎么处理每个桶）？
2. 把你的 reduce-scatter 换成一次 all-reduce，再留下本 rank 的那一段。预测发出的字节数，以及 3 个 rank 时参数是否仍与 DDP 逐位相同；
   然后运行检查。
3. N = 64，一个 7B 参数的模型，bf16 加 AdamW：用你的类，每个 rank 的优化器这一侧（主权重分区 + 动量 + 方差）占多少 GB？用 DDP 呢？
4. 为什么每个 rank 上的扁平缓冲区都必须按同样的顺序排列？如果有一个 rank 把顺序反过来，检查程序会说什么？

检查程序让它的 rank 一直运行着，好让第二次尝试快一些。做完之后把它们停掉：
"""),
}
