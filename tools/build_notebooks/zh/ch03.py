"""第 3 章「ZeRO 三阶段」、附录 3a 与练习 3、3b 的中文（tools/build_notebooks/ch03.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。英文改动后哈希对不上，
tests/test_zh_edition.py 会点名该单元格；改好中文后运行
``python tools/build_notebooks/zh_edition.py --accept <单元格 id>``。
"""

ZH = {
# -- notebooks/03_three_stages.ipynb ---------------------------------------------------------------
"ch03-00": ("c2ea443017df", r"""
# 第 3 章 · ZeRO 三阶段

第 2 章结尾，搬家队撞上了墙。每个工人都背着整套家当：家具（**参数**，parameters）、搬迁贴纸（**梯度**，gradients）
和那本厚厚的小本子（**优化器状态**，optimizer states）。多雇工人，只是多了几份同样的负重，并没有多出空间。

于是队长重新分工。每个工人照样把自己那份箱子搬进门（每个 rank 在自己那一份 batch 上做前向和反向传播，forward / backward）；变的是每个工人必须*保管*什么：

1. **先拆小本子。** 对每件家具，小本子里都抄着一份精确的登记簿记录（fp32 **主权重**，master weights），外加两行它最近怎么挪动的记录
   （Adam 的**动量**和**方差**，momentum 和 variance）：每个参数 12 字节。队长把小本子撕成 N 份；每个工人只更新自己那份所记的家具，
   再把新位置告诉其他人。**这是 stage 1。**
2. **再拆搬迁贴纸。** 一个工人只需要自己那份小本子对应的贴纸，所以一批贴纸一写好，搬家队就把它们加起来，每人只留下自己的那份。
   **这是 stage 2。**
3. **最后连家具本身也拆。** 每个工人只背 1/N 的家当；开始收拾一个房间之前，大家互相借来这个房间要用的家具，用完再还回去。
   **这是 stage 3。**

每拆一样，每个背包就轻一截；每拆一样，屋里的喊话也就多一些。本章在真实的 rank 上把这两样都量一量，并与 ZeRO 论文的公式并排对照。
"""),
"ch03-01": ("e46a1bcd8a84", r"""
## 论文怎么说，DeepSpeed 怎么做

Ψ 是可训练参数的个数（元素数），N 是 rank 数。混合精度加 Adam 时，一个参数要花 2 字节（bf16）+ 2（bf16 梯度）
+ 12（fp32 主权重、动量、方差）= **16 字节**。按每个 rank 计：

| stage | 在 N 个 rank 之间切分的 | 每个 rank 的模型状态字节数 | 每个 rank 每步的通信量：论文 |
|---|---|---|---|
| 0（DDP） | 不切分 | **16Ψ** | **2Ψ**：对梯度做 all-reduce |
| 1 | 优化器状态 | 2Ψ + 2Ψ + 12Ψ/N = **4Ψ + 12Ψ/N** | **2Ψ**：对梯度做 reduce-scatter（Ψ），对参数做 all-gather（Ψ） |
| 2 | + 梯度 | 2Ψ + (2 + 12)Ψ/N = **2Ψ + 14Ψ/N** | **2Ψ**：同样这两次集合通信（collective） |
| 3 | + 参数 | **16Ψ/N** | **3Ψ**：前向 all-gather（Ψ），反向再 all-gather 一次（Ψ），reduce-scatter（Ψ） |

**DeepSpeed 0.19.8 在 stage 1 和 2 搬的并不是论文的字节数**：默认设置下，它对每个梯度桶（bucket）做 **all-reduce**（2Ψ），
每个 rank 留下自己负责的那几段，更新之后再对参数做 all-gather（Ψ），合计 **3Ψ**。zerolab 默认照 DeepSpeed 的集合通信来做
（`benchmarks/results/side_by_side.txt` 把两边并排列出）；论文的 reduce-scatter 是 zerolab 自己的开关，
`"zerolab": {"ideal_reduce_scatter": true}`。

**怎么数字节。** 我们数的是在环形算法里每个 rank 发出的字节，口径和 nccl-tests 计算*总线带宽*（bus bandwidth）时以及
`zerolab.comm` 一样：S 字节的 all-reduce 每个 rank 要付 2(N−1)/N·S，reduce-scatter 或 all-gather 要付 (N−1)/N·S；
论文数的是元素个数，并且略去了 (N−1)/N。折叠椅（**激活值**，activations）不属于模型状态：哪个 stage 都不切分它，这里不计入。
在 zerolab 里，一个 stage 就是三个开关（`zerolab/zero/stage.py` 开头的那张表）。
"""),
"ch03-03": ("6908c407515f", r"""
## 每个 rank 的显存：实测值与公式并排

`ch03.measure_all` 在每个搬家队的每个 rank 上、对每个 stage 运行 `train_and_measure`：它像 DeepSpeed 用户那样用
`zerolab.initialize(model, config)` 构建引擎，训练两步（AdamW 在第一步时创建它的状态），测量第二步这个 rank 持有多少
（`engine.memory()`，从张量读出）以及它发出了多少（`engine.ledger`）。

**先预测，再运行。** N = 4 时，DDP 每个 rank 持有 16Ψ = 3,022,400 字节的模型状态。Stage 1 会留下其中的几分之几？
Stage 2 呢？Stage 3 呢？写下三个分数。
"""),
"ch03-05": ("4121e4b14b5b", r"""
多数人对每个 stage 都猜 1/4：加了 4 个工人，每人就该背四分之一。只有 stage 3 是这样：stage 1 留下 DDP 字节数的 **0.438**
（16Ψ 里的 7Ψ，因为它只拆了小本子，bf16 的参数和梯度在每个 rank 上仍是完整的），stage 2 留下 **0.344**（5.5Ψ）。
Stage 1 一下子就卸掉了大部分重量，因为 16 个字节里有 12 个是小本子。

“left”那一列不是噪声，它有三个来源：每块扁平缓冲区都**补齐**（padding）到 N 的整数倍（每个补齐元素 16 字节，每种状态一旦切分就除以 N）；
那个**冻结**的参数（`temperature`，2 字节。在 stage 0-2 里每个 rank 上都是完整的；在 stage 3 里和其他参数一样被切分，
就像 DeepSpeed 的 `zero.Init` 那样，补齐到 N 个元素、每个 rank 一个，所以同样是 2 字节）；还有 AdamW 为它更新的每个扁平组保留的
4 字节 **step 计数器**。
下一个单元格把这些加起来，再画出这张表。
"""),
"ch03-07": ("f407de5fc27e", r"""
不管 N 是多少，DDP 都停在 16Ψ：第 2 章的那堵墙。Stage 1 永远不会低于 4Ψ，stage 2 永远不会低于 2Ψ；只有 stage 3 按 1/N 一路下降。
这些是 DeepSpeed 在默认 bf16 设置下的数字。（如果设了 `"data_types": {"grad_accum_dtype": "fp32"}`，它的 stage 1 会改用
`BF16_Optimizer`，多出一块完整的 fp32 梯度缓冲区，共 **8Ψ + 12Ψ/N**；在 stage 0，DeepSpeed 0.19.8 不接受 bf16 参数配 fp32 累积这种组合，
直接抛出 `NotImplementedError`（`runtime/engine.py` 的 `_do_optimizer_sanity_check`，第 2305-2323 行）。zerolab 在每个 stage 都拒绝这个配置块。）

一个 rank 持有的不只是模型状态：stage 2 在反向传播期间要保留一个在途的**梯度桶**；stage 3 要保留**收集（gather）来的参数**，
既有正在使用的模块的，也有提前收集的模块的；`engine.memory()` 把它们记为 `peak_buffers`。（*在 GPU 集群上*，DeepSpeed 只分配一次桶缓冲区并反复使用；
这里则是桶装满时才创建一块缓冲区。）
"""),
"ch03-09": ("df0bd098f7ae", r"""
在这里，stage 3 的峰值装着**整个模型**，还比 Ψ 多一点：冻结的 `temperature` 也要收集（1 个元素，补齐到 N = 4 个）。
DeepSpeed 的默认值是按数十亿参数定的（`stage3_prefetch_bucket_size` = 提前收集
5·10⁷ 个元素，`stage3_max_live_parameters` = 同时最多 10⁹ 个）；在小模型上想省显存，就得把它们调小。

## 每步的通信量：DeepSpeed 的 3Ψ 与论文的 2Ψ

账本里一个 rank 发出的字节，分成**梯度**和**参数**两部分；最后一列除以 (N−1)/N·2Ψ 字节，所以读出来就是论文的 2Ψ 和 3Ψ。
Stage 3 分别在复用距离（reuse distance）为 0 且关掉预取（每个模块在反向时重新收集一遍，即论文的计法）和 DeepSpeed 默认的复用距离下运行。

**先预测，再运行。** N = 4 时，stage 2 只留下 DDP 四分之一的梯度。按论文的做法，它搬的字节比 DDP 少、一样多，还是更多？
按 DeepSpeed 的做法呢？Stage 3 呢？每一行写下一个 Ψ 的倍数。
"""),
"ch03-11": ("9d09ffcfb29a", r"""
多数人以为留得少就发得少。并非如此。**按论文的做法**，stage 1 和 2 搬的恰好是 DDP 的 2Ψ：一次 all-reduce *本来就是* 一次
reduce-scatter 接一次 all-gather，ZeRO 只是把优化器更新挪到了两者之间，所以省下的显存在通信上**不花一分钱**。**按 DeepSpeed 的做法**，
它们搬的是 **3Ψ**：它的 stage 1-2 只有一块扁平缓冲区，切成 N 个连续的分区（partition；最后有图），一个桶落在一个或两个 rank 的分区里，
没法 reduce-scatter 成 N 个等大的块，所以每个桶都做 all-reduce（2Ψ），更新之后再对参数做 all-gather（Ψ）。
（设 `"use_multi_rank_bucket_allreduce": false` 则改为向每个负责的 rank 各发一次 `reduce`。）

复用距离为 0、关掉预取时，stage 3 搬的是 **3.272 Ψ**：多出来的 0.272 Ψ 是 embedding **多收集了两次**（2 × 25,700 / 188,900），
因为输出头和它共享权重。前向时要为输出头再收集一次；反向时还要为 embedding 自己的反向再收集一次：DeepSpeed 在每个模块的反向之后
就释放它的参数（`post_sub_module_backward_function`），所以输出头的反向一结束就把它放掉了，而复用距离为 0 时什么也不保留。
冻结的 `temperature`（1 个元素，补齐到 N 个）在前向和反向里也都要收集，每个参数也都补齐到 N 的整数倍（DeepSpeed 把每个参数单独切分）。用 DeepSpeed 默认的
`stage3_max_reuse_distance`（10⁹ 个元素），这个小模型从前向到反向一直保持收集状态，只搬 2Ψ（外加补齐后的 temperature 那几个字节）。
核对结果和图：
"""),
"ch03-13": ("513e2305d332", r"""
### 梯度累积：stage 2 每个微步都要付一次

设 `gradient_accumulation_steps = 4` 时，每个优化器步里一个 rank 要跑 4 次前向和反向。Stage 1 保留完整的梯度，可以在本地把各个微步
（micro-step）的梯度加起来；stage 2 只保留自己的分片。

**先预测，再运行。** N = 3、梯度累积（gradient accumulation）为 4 时，每一行每个优化器步各搬多少个 Ψ 单位？
（不做累积时是 2、3、2、3、2 和 3.272，和上面一样。）
"""),
"ch03-15": ("e0e06babba2d", r"""
Stage 0 和 1 每个优化器步只把加好的梯度发一次，与累积多少步无关。Stage 2 在每个微步都必须归约每个桶，反向传播填满一个就归约一个：
按 DeepSpeed 的做法是 4 × 2 + 1 = 9 个单位而不是 3，按论文是 4 × 1 + 1 = 5 而不是 2。这就是从不持有完整梯度的代价。
Stage 3 则样样都付 4 倍（4 × 3.272）。

### Stage 3 的一步：收集、使用、释放

在 2 个 rank 上跑 stage 3，账本读起来就像搬家队的一天：每个模块的参数在它的前向之前用 all-gather 收集起来，用完释放（释放不发送任何东西）；
反向传播按相反的顺序再收集一遍；梯度装桶发出，每个桶一次 reduce-scatter；最后是一次小小的 all-reduce（8 字节的梯度范数）。

**预取**（prefetch）是 DeepSpeed 的规则（`partitioned_param_coordinator.py` 里的 `fetch_sub_module`）：第二步把各模块被取用的顺序记下来，
前向和反向记在同一条轨迹里；从第三步起，每次取用还会从这条顺序里依次取出接下来的条目，对其中尚未收集的发起一次异步 all-gather，
总量不超过 min(`stage3_max_live_parameters` − 已收集的元素数, `stage3_prefetch_bucket_size`)，并把取出的每个条目都记为*已为*它后面那次使用*取过*。
一个模块的参数（它自己的，加上与它共享的）用一次 all-gather 收集。下面的时间线按本章的设置关掉了预取：每个模块都是用到时才收集。
（*在 GPU 集群上*，这些 all-gather 在自己的 CUDA 流上运行，与模块的 kernel 并行。）
"""),
"ch03-17": ("fef937d35a6a", r"""
有两类小的集合通信没有列进表里。一类是 DeepSpeed 的，按 0.19.8 的发法：stage 1-2 用 bf16 时，一个 1 字节的溢出标志
（`bf16.check_grad_overflow`）和 4 字节的梯度范数；stage 3 只有范数，fp64 的 8 字节（它只在 fp16 下才检查溢出）；stage 0 只在 fp32 下做梯度裁剪时发范数。另一种是 stage 3 里 **zerolab 自己的** 16 字节**报头**（header），在每个单元的参数收集之前发出，
这样走了不同模型路径的 rank 会抛出 `ModuleOrderError`，而不是卡死；DeepSpeed 不发这种东西，账本把它们单独归档（`ledger.checks`），
设 `"zerolab": {"order_checks": false}` 可以关掉。

**先预测，再运行。** 关掉预取时（本章的设置），测得的 stage 3 一步在每个模块运行时收集它的参数，前向一次，反向再一次。
换成 DeepSpeed 默认的预取（`stage3_prefetch_bucket_size` 为 5·10⁷），会有几次 all-gather、几个报头、多少参数字节？
"""),
"ch03-19": ("a33676d25858", r"""
不预取时，每次取用模块就是一次 all-gather，外加一个报头。（Stage 2 的那一个报头，是各 rank 对反向梯度钩子触发顺序的唯一一次核对，
DeepSpeed 的桶正是按这个顺序装的。它是 zerolab 自己的，只在第二次反向时发一次。）用 DeepSpeed 默认的预取，下降的不只是调用次数，**字节数**也少了。
复用距离为 0 时，它的预取器把取出的每个后续使用都记为已取过（`partitioned_param_coordinator.py` 里的 `__most_recent_step_id_param_fetched_for`），
而 DeepSpeed 不释放已为后续使用取过的参数，于是反向里的那些收集都没了，只剩约 2Ψ，和复用距离 10⁹ 时一样。第 8 章逐个旋钮去量它；
第 6 章会测一次调用要花多少代价。

### Stage 3 的小参数：`stage3_param_persistence_threshold`

收集一个 100 个元素的 LayerNorm 权重，要花一整次调用，才省下 200 个字节。DeepSpeed 把元素数不超过
`stage3_param_persistence_threshold` 的参数都设为**常驻**（persistent；总量受 `stage3_model_persistence_threshold` 限制，默认不限）：
在每个 rank 上都是完整的，每步之后刷新（每个参数一次 all-gather，即 DeepSpeed 的 `_post_step`），梯度照样做 reduce-scatter。有 P 个常驻元素时，公式变成
3(N−1)/N·(Ψ−P) + 2(N−1)/N·P。阈值取 0、30,000（位置表、embedding、每个 LayerNorm 和偏置）以及 DeepSpeed 的默认值 100,000：

**先预测，再运行。** 用 DeepSpeed 的默认阈值，stage 3 在这个模型上前向和反向会收集几个模块，搬多少字节：3Ψ 个单位、2Ψ，还是更少？
"""),
"ch03-21": ("5b0cef635a27", r"""
前向和反向里一个模块也不收集：这里每个参数都不到 100,000 个元素，于是 stage 3 悄悄变成了论文里的 stage 2（每个 rank 377,808 字节的参数，即
2Ψ，加上补齐到 4 个元素的冻结参数 `temperature`，8 字节；通信量 2Ψ，比 DeepSpeed 自己的 stage 2 还少）。更新之后的那些 all-gather
刷新每个常驻参数，每个一次，冻结的那个也在内（DeepSpeed 的 `_post_step`）。在数十亿参数的模型上，100,000 个元素
不过是一个 LayerNorm 或一个偏置；在小模型上，阈值要自己设。阈值为 30,000 时，embedding 是常驻的，它多出的那几次收集也就没了，
实测值与公式只差 6 个字节：冻结的 `temperature` 随常驻参数一起刷新（(3/4)·2·4 字节；公式只计 Ψ 个可训练元素）。

## 先求对：每个 stage 都和单进程训练一致

我们用 **fp32** 在 1 到 4 个 rank 上把每个 stage 训练 3 步，并在同样的全局 batch 上把每个参数和单进程训练对比
（`engine.full_params()` 收集 fp32 的值，就像 DeepSpeed 的 `zero_to_fp32` 那样）。

**先预测，再运行。** 4 个 rank 上的 stage 3 会和单进程逐位相同吗？如果不会，差多少：几个舍入步（10⁻⁶ 以下）、AdamW 一步的十分之一
（3·10⁻⁴ 以下），还是整整一步？DDP（stage 0）会比 stage 3 更接近吗？
"""),
"ch03-23": ("81a67c13a7de", r"""
N ≥ 2 时并不逐位相同，而且超出了 fp32 的最后几位（1 附近的一个舍入步约为 6·10⁻⁸），不过远小于一步（lr = 3·10⁻³）。
具体数值是舍入噪声，换一颗 CPU 的 SIMD kernel 就会变；这些上界则处处成立。DDP 并不更接近：这不是 ZeRO 造成的。
**[附录 3a](03a_appendix_adamw_rounding.ipynb)** 揪出了真凶：求和的顺序，经 AdamW 放大，任何数据并行训练都有。

## 谁负责哪一段：分片

一块 `padded_numel` 个元素（N 的整数倍）的扁平缓冲区被切成 N 个等大的块，**rank r 负责第 r 块**，
`[r · padded_numel / N, (r + 1) · padded_numel / N)`：按 rank 顺序排列的等大块，因为 all-gather 收集的、reduce-scatter 交付的正是这样的块。

DeepSpeed 的 stage 1 和 2 把所有参数按梯度顺序（最后一层在前）排成**一块**扁平缓冲区来切，所以一个 rank 的分区是模型中连续的一段，
而一个桶（红线）落在哪里就是哪里。论文的布局（那个开关）则让每个桶成为自己的一块缓冲区，再切成 N 个分片。
下图是 3 个 rank 上的 stage 1，按负责的 rank 着色；黑线是参数之间的边界。
"""),
"ch03-25": ("2484ad8ed721", r"""
一个参数被切成两半不成问题：Adam、AdamW 和 SGD 都是逐元素更新的，所以对扁平缓冲区的一个分片做更新，和对其中的各个参数做更新是一回事。
（一次看整个张量的优化器就不行了，比如 LAMB 的信任比率（trust ratio）；这就是为什么 zerolab 和 DeepSpeed 一样，用其他优化器时要求设置
`zero_allow_untested_optimizer`。）

这些 rank 用完了，关掉它们：
"""),
"ch03-27": ("ee0a77e2e6a6", r"""
## 本章测得的

在一个 188,900 个参数的 TinyLM 上，bf16 + AdamW，1 到 4 个 rank，按每个 rank 计：

- **显存**，N = 4 时：stage 1 留下 DDP 字节数的 0.438，stage 2 留下 0.344，stage 3 留下 0.25；把补齐、冻结的参数和 AdamW 的
  step 计数器算进去之后，每一项都和公式分毫不差。
- **通信量**，以 (N−1)/N·2Ψ 为单位：DDP 为 2；DeepSpeed 的 stage 1-2 为 3（每个桶都 all-reduce），论文的做法为 2（zerolab 的开关）；
  stage 3 在复用距离为 0、关掉预取时为 3.272（共享权重的 embedding 多收集了两次，前向时为输出头，反向时为它自己的反向，因为 DeepSpeed
  在每个模块的反向之后就释放参数），用 DeepSpeed 的默认值约为 2。复用距离为 0 时，DeepSpeed 的预取连字节数也会改变，
  因为预取器扫过的参数会一直收集着留给反向。梯度累积为 4 时，stage 2 每个微步都要付：按 DeepSpeed 的做法为 9，按论文为 5。
- **正确性**（fp32）：每个 stage 与单进程的接近程度都和 DDP 一样，用 AdamW 时在 3·10⁻⁴ 以下（附录 3a 解释了为什么不能更近）。

## 思考题

1. 用论文的 reduce-scatter 时，N = 4 的 stage 2 只留下四分之一的梯度，搬的字节却和 DDP 一样多。一步里每个梯度字节都去了哪里？
   为什么既没省下、也没多出？DeepSpeed 的 all-reduce 多出了什么？
2. 一个 7B 模型，bf16，64 张 GPU，stage 2 时每个 rank 每步发出多少 GB？按 DeepSpeed 的做法和按论文的做法各是多少？
3. 显存表里的“left”在 N = 3 时达到 91 字节，N = 4 时最多 38 字节。当 N 不能整除缓冲区大小时，三个原因里哪一个会变大？
4. 为什么 stage 3 的通信量是 3Ψ，而不是 2Ψ + Ψ/N？数一数前向的收集、反向的收集和 reduce-scatter。然后，在关掉搬家队之前，运行
   `crews[4].run(train_and_measure, 3, stage3_max_reuse_distance=10**9)`（DeepSpeed 的默认值）：这里哪些收集没有了？

## 轮到你了

打开 [**`exercises/zh/03_stage1_shards.ipynb`**](../../exercises/zh/03_stage1_shards.ipynb)。你要写 stage 1 赖以成立的两样东西：
(a) 分片归属规则 `shard_range(padded_numel, world_size, rank)`，以及 (b) 只更新分片的 AdamW 步。检查程序会把你的代码接进 2 个和 3 个
rank 上的真实引擎（你的规则去切 DeepSpeed 的扁平缓冲区，也去切论文的各个桶），并把训练结果和单进程对比。

然后打开 [**`exercises/zh/03b_stage2_buckets.ipynb`**](../../exercises/zh/03b_stage2_buckets.ipynb)，这是 stage 2 的核心：
你要写反向传播期间一个梯度桶的处理（什么时候算装满、发出什么、本 rank 留下什么），按论文的模式（每个桶做 reduce-scatter，
zerolab 的开关；DeepSpeed 对它做 all-reduce），检查程序会用它训练 stage 2 和 3。
最后，[**`exercises/zh/03c_zero1_by_hand.ipynb`**](../../exercises/zh/03c_zero1_by_hand.ipynb) 让你不用 zerolab 引擎、只用
`torch.distributed` 从头搭出完整的 stage 1：一个分片的优化器，检查程序在 2 个和 3 个 rank 上把它和 PyTorch 的 DDP 逐位对照，
并测量它的通信量和显存。
"""),
# -- notebooks/03a_appendix_adamw_rounding.ipynb -----------------------------------------------------
"ch03a-00": ("fd1dd55337eb", r"""
# 附录 3a · 这是谁的舍入？数据并行、求和顺序与 AdamW

第 3 章在 1 到 4 个 rank 上用 fp32 训练了每个 stage，并和一次吃下整个 batch 的单进程做了对比。差别不是零：N ≥ 2 时超过了 10⁻⁶
（几个 fp32 舍入步），但低于 3·10⁻⁴，即 AdamW 一步挪动参数幅度的十分之一。这篇附录要查清这是谁造成的。嫌疑人有两个：ZeRO
（分片、reduce-scatter、参数收集），或者数据并行本身，它把 batch 拆开、再把各部分加起来。

实验：让**一个进程**做和 N 个 rank 相同的算术，也就是把每个 batch 拆成 N 个微批次、把它们的梯度加起来
（即梯度累积，gradient accumulation，在单个 rank 上设 `gradient_accumulation_steps = N`），然后再把 AdamW 换成普通的 SGD。
这些运行用的都是第 3 章的设置（`zerolab/course/chapters/ch03.py`）：188,900 个参数的 TinyLM，三个 12 条序列的全局 batch，fp32 训练 3 步。
"""),
"ch03a-02": ("545897b16226", r"""
## 一个进程，N 个微批次

对 N = 2、3、4：N 个 rank 上 zerolab 的 stage 3（改动最多的那个 stage），以及一个进程在同一个 batch 上累积 N 个微批次
（在 1 个人的搬家队上运行 `train_fp32(0, accumulate=n)`），分别与整 batch 的那次运行对比，也彼此对比。

**先预测，再运行。** 累积 N 个微批次的单进程，离整 batch 的结果是比 N 个 rank 更近、一样远，还是更远？它会落在 rank 的结果上吗？
"""),
"ch03a-04": ("60ada45996f2", r"""
多数人以为单进程会更近：没有分片，也没有集合通信。实际上它离整 batch 的结果和 N 个 rank 一样远。N = 2 时，它和 2 个 rank 的结果
逐位相同：梯度减半在二进制里是精确的，而且 a + b = b + a。N = 3 和 4 时，它落在 rank 的结果附近，但并不重合，因为求和顺序不同
（单进程是一个微批次接一个微批次地加，gloo 的集合通信按自己的顺序把各 rank 的部分加起来，NCCL 的环也是如此）；而且 N = 3 时，
连除法放在哪儿都有影响：梯度累积在反向之前把损失除以 3，各 rank 则是先把梯度除以 3 再相加，而 1/3 在二进制里不精确。
所以这个差别不是 ZeRO 造成的：是求和顺序和除法的位置，改变了每个梯度元素的最后几位。

## SGD 把最后几位原样传下去；AdamW 把它们放大

同样的对比，换成普通的 SGD（lr 0.1），zerolab 的 stage 3 对比整 batch 的单进程。

**先预测，再运行。** 用 SGD 时，求和顺序一样被打乱了。它和单进程的差别会和 AdamW 一样大（3·10⁻⁴ 以下但超过 10⁻⁶），
还是缩小到一个舍入步（10⁻⁶ 以下）？
"""),
"ch03a-06": ("233d4e0920ad", r"""
SGD 把那最后几位原样传了下去：每个 N 都只差一两个舍入步。所以让它们变大的是优化器。AdamW 用每个元素自己方差的平方根去除它的动量，
于是一个梯度几乎相互抵消的元素（正负贡献加起来几乎为零）仍会挪动大约 lr，而那个小小的和的最后几位决定了这次挪动的一部分。

最小的例子只要三个数就能说明。三个 rank 对同一个梯度元素分别贡献 1、10⁻⁸ 和 −1；真正的和是 10⁻⁸。fp32 大约有 7 位有效数字。

**先预测，再运行。** 在 fp32 下，(1 + 10⁻⁸) − 1 是多少？(1 − 1) + 10⁻⁸ 呢？
"""),
"ch03a-08": ("45b0f8597bcb", r"""
0 和 10⁻⁸：同样三个数，两种顺序，两个和。10⁻⁸ 小于 1 和下一个 fp32 数之间间隔的一半（约 6·10⁻⁸），所以先加到 1 上就丢了。

**先预测，再运行。** 从取值为 0 的参数出发，分别用这两个梯度各做一次 AdamW 更新和一次 SGD 更新（lr 3·10⁻³，torch 默认的 eps 10⁻⁸）。
每次更新把参数挪动多远，以 lr 为单位？梯度里 10⁻⁸ 的差别要紧吗？
"""),
"ch03a-10": ("3ad0a8a4e2dd", r"""
SGD 的更新相差 lr 的 10⁻⁸，AdamW 的相差 **lr 的一半**。AdamW 第一步把每个元素挪动 lr · g / (|g| + eps)，与 g 的大小无关：
g = 10⁻⁸ = eps 时是 lr / 2，g = 0 时不动。所以一个只是零附近舍入噪声的梯度，仍会让参数挪动 lr 的相当一部分。在之后的几步里，
动量和方差会把这类元素平均掉，这就是为什么第 3 章的差别一直在 lr 的十分之一以下。

任何数据并行训练都有这个现象，不管用不用 ZeRO：变的只有求和顺序，哪个 stage 都没有让它变大（第 3 章表格里四个 stage 的各行相差无几）。
要在不同的总 rank 数（world size）之间做到确定性训练，就得处处使用相同的求和顺序，而没有哪种环形或树形 all-reduce 能保证这一点。

**思考题。** (1) 在 `first_step_move` 里把 eps 设为 10⁻⁶（`optimizer([p], lr=3e-3, eps=1e-6)`）：AdamW 现在挪动多远？
这说明了 eps 起什么作用？(2) 为什么 N = 2 是唯一一个梯度累积与多 rank 逐位一致的总 rank 数？

返回**[第 3 章](03_three_stages.ipynb)**。
"""),
# -- solutions/03_stage1_shards.ipynb -----------------------------------------------------------------
"ex03-00": ("7c21ce7a8d46", r"""
# 练习 3 · 从内部看 stage 1：谁负责哪一段，以及只更新分片的 Adam 步

在 stage 1，每个工人只保管小本子的一部分。这要靠两条小规则，两条都由你在这里写：

- **(a) 归属规则**：rank r 负责扁平缓冲区里的哪些元素；
- **(b) 只更新分片的 AdamW 步**：每个 rank 对自己的分片做的更新，只用到自己那部分优化器状态。

检查程序不只在玩具输入上测你的代码：它们把代码接进 zerolab 的 stage 1 引擎，在 2 个和 3 个真实的 rank 上训练一个小 TinyLM，
并把参数和普通的单进程训练对比。哪里不对，它们会告诉你是什么、在哪里、为什么要紧。

**检查不通过时**，它会用几行话说明哪里错了、期望的是什么，再给一条点出可能错误的提示。想同时看完整的 Python 回溯
（traceback；包括 zerolab 自己的代码，以及任何一个 rank 上的回溯），运行 `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，
再运行一次检查单元格（`zerolab.course.checks.full_tracebacks(False)` 让报错恢复简短），或者在启动 Jupyter 时设置环境变量
`ZEROLAB_FULL_TRACEBACK=1`。
"""),
"ex03-01": ("2baac2c6dafa", r"""
## (a) 分片归属规则

在 stage 1 和 2，DeepSpeed 把可训练参数排进一块 `padded_numel` 个元素的一维扁平缓冲区：参数首尾相接，用零补齐到
`world_size` 的整数倍。（论文的布局，即 zerolab 的 `ideal_reduce_scatter` 开关，为每个梯度桶各建一块这样的缓冲区。）
rank `rank` 负责其中连续的一段，即它的**分区**（partition），以元素偏移表示为 `[start, end)`：它的优化器要更新的那些元素。

引擎对这条规则的要求：

- 所有 rank 的段**铺满**缓冲区：合起来覆盖 `[0, padded_numel)`，不留空隙、不相重叠（每个元素恰好有一个负责的 rank）；
- 它们**等大**：更新之后的 all-gather 收集的（以及论文的 reduce-scatter 交付的）都是 `padded_numel / world_size` 个元素的段；
- 它们**按 rank 顺序排列**：all-gather 把 rank r 的那段放在缓冲区的第 r 个位置，所以 rank r 必须负责第 r 段。

写出 `shard_range(padded_numel, world_size, rank) -> (start, end)`。
"""),
"ex03-03": ("e44981198c2e", r"""
检查程序先在几种大小下测试你的范围能否铺满缓冲区；然后在每个 rank 上用你的规则替换引擎自己的规则
（`zerolab.memory.flat.FlatGroup.shard_range`），在 2 个和 3 个 rank 上训练 stage 1，分别用 DeepSpeed 的布局（一块扁平缓冲区；
有些参数横跨两个分区）和论文的布局（每个桶一块缓冲区），并把每个参数和单进程训练对比。
"""),
"ex03-05": ("c139b70f82cd", r"""
## (b) 只更新分片的 AdamW 步

梯度归约之后（DeepSpeed 对每个桶做 all-reduce，rank r 留下落在自己分区里的那几段），rank r 只持有自己分片的平均梯度，
以及这个分片的 fp32 主权重和 Adam 的动量、方差。优化器更新用不到别的东西：AdamW 是逐元素更新的。

写出 `adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)`。四个张量都是同样长度的一维 fp32 分片；
**原地**更新 `param`、`exp_avg` 和 `exp_avg_sq`（它们是引擎自己的缓冲区；什么也不返回）。`step` 是这次更新的序号，从 1 开始。
照 torch 的 `AdamW`（解耦的权重衰减）来做：

1. `param ← param · (1 − lr · weight_decay)`
2. `exp_avg ← β₁ · exp_avg + (1 − β₁) · grad`
3. `exp_avg_sq ← β₂ · exp_avg_sq + (1 − β₂) · grad²`
4. `param ← param − lr / (1 − β₁^step) · exp_avg / (√exp_avg_sq / √(1 − β₂^step) + eps)`
"""),
"ex03-07": ("1293984f9490", r"""
检查程序先在一个随机分片上把一步更新和 `torch.optim.AdamW` 对比；然后把你的函数包进一个优化器，传给
`zerolab.initialize(..., optimizer=...)`，在 2 个和 3 个 rank 上训练 stage 1（每个 rank 用你的代码只更新自己的分片），
并和使用 torch 的 AdamW 的单进程训练对比。
"""),
"ex03-09": ("0c0f420988e6", r"""
## 它在 zerolab 里的位置

你写的规则就是 `zerolab/memory/flat.py` 里的 `FlatGroup.shard_range`；用它的是 stage 1：`zerolab/zero/reduce.py` 里的
`ReduceScatterAtBoundary` 对每个梯度桶做 all-reduce，留下落在本 rank 分区里的那几段（DeepSpeed 的做法；打开那个开关则对每个桶做
reduce-scatter），优化器更新自己负责的分区，`zerolab/zero/params.py` 里的 `ReplicatedParams.publish` 再对参数做 all-gather。
zerolab 用来更新的优化器就是 torch 自己的，作用在分片张量上（`zerolab/zero/optim.py`），这就是为什么默认只允许逐元素的优化器。

检查程序让它的 rank 一直运行着，好让第二次尝试快一些。做完之后把它们停掉：
"""),
# -- solutions/03b_stage2_buckets.ipynb ---------------------------------------------------------------
"ex05-00": ("a01a8e967cb9", r"""
# 练习 3b · stage 2 的桶：在反向传播中做 reduce-scatter

在 stage 2，每个工人只保管自己的搬迁贴纸（自己分片的梯度）。谁也不会持有整套贴纸：反向传播还在进行时，贴纸就被装进箱子
（**桶**，bucket），一箱装满立刻发出，每个工人留下属于自己的那份，箱子随即扔掉。

你要写 zerolab 的 `ReduceScatterInBackward`（在 `zerolab/zero/reduce.py` 里，stage 2 和 3 共用）中完成这件事的两部分，按**论文的模式**：
每个桶是自己的一块扁平缓冲区，切成 N 个分片，并做 **reduce-scatter**，于是每个 rank 只收到自己那个分片的和。
DeepSpeed 的 stage 3 也是这样做的；在 stage 2，这是 zerolab 的开关 `"zerolab": {"ideal_reduce_scatter": true}`，检查程序会把它打开。
DeepSpeed 自己的 stage 2 只有一块扁平缓冲区，对每个桶改做 **all-reduce**，留下自己分区里的那几段（第 3 章测过两者的差别：
3Ψ 对论文的 2Ψ）。检查程序在每个 rank 上把你的函数接进真实引擎，在 2 个和 3 个 rank 上、用 fp32 和 bf16、梯度累积
（gradient accumulation）为 1 和 2，以 stage 2 和 3 训练 TinyLM，并把每个参数和 zerolab 自己的引擎对比，（fp32 时）也和单进程训练对比。

**检查不通过时**，它会用几行话说明哪里错了，并点出可能的错误。想看完整的回溯，运行
`import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，再运行一次检查单元格。
"""),
"ex05-01": ("28f35d464be6", r"""
## (a) 桶什么时候算装好了？

反向传播一次产生一个参数的梯度，顺序与前向相反。每个桶是一块 `padded_numel` 个元素的扁平缓冲区，首尾相接地装着几个参数。
桶里第 `i` 个参数的梯度到达时，引擎调用

    add_grad(bucket, where, grad, arrived, i, n_params)

- `bucket`：这个桶的扁平缓冲区（一维，每次反向传播开始时为零）；
- `where`：桶里属于参数 `i` 的那一段（`bucket[where]`）；
- `grad`：梯度，形状和参数相同；
- `arrived`：一个集合，这次反向传播里对这个桶的所有调用共用它：梯度已经到了的那些参数；
- `n_params`：这个桶装着几个参数。

把梯度放到它的位置上，记下它已到达，并且**恰好在桶装满时返回 True**；之后引擎就把它发出去（每个 rank 上的桶顺序都相同）。

*先预测：* 如果一个桶在它的第一个梯度到达时就被发出去，会出什么问题？
"""),
"ex05-03": ("c833f00d2a2b", r"""
## (b) 发出什么，留下什么

轮到一个桶时，引擎调用

    reduce_bucket(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard)

- **发出**：把桶转成**通信数据类型** `comm_dtype`（bf16 训练可以用 fp32 通信，即 DeepSpeed 的 `communication_data_type`），
  并**预先除以 `world_size`**，这样各 rank 相加的结果就是平均梯度（先除后加，也能防止 fp16 的和溢出）；
- `chunks = reduce_scatter(send)` 是在各 rank 上真正做一次 reduce-scatter。和 `zerolab.comm.ring_reduce_scatter`
  （第 2 章的练习）一样，它返回桶的全部 `world_size` 块，但只有 `chunks[rank]` 是所有 rank 上的和；其余的是半路上的部分和；
- **留下**：把本 rank 的那一块加到 `grad_shard` 上，即本 rank 在这个桶里的梯度分片（引擎自己的缓冲区：原地修改）。
  做梯度累积时，引擎每个微步调用一次 `reduce_bucket`，`grad_shard` 最后必须是它们全部的和。
"""),
"ex05-05": ("c151da498463", r"""
检查程序把 `ReduceScatterInBackward.accept` 和 `ReduceScatterInBackward.issue` 换成调用你的函数的版本（在每个 rank 上，仅在检查期间），
然后训练，并盯着每一次调用：什么时候说桶装好了，发出了什么（数据类型，以及大小和桶相比如何），之后分片里是什么。
"""),
"ex05-07": ("817e91274428", r"""
## 它在 zerolab 里的位置

`zerolab/zero/reduce.py` 里的 `ReduceScatterInBackward.accept` 和 `ReduceScatterInBackward.issue` 做的就是你写的事；
`GradReducer._reduce` 用 DeepSpeed 对这份配置会用的集合通信把桶发出去（打开 `overlap_comm` 时是异步的，桶在途时反向传播接着算）：
这里和 stage 3 用 reduce-scatter，DeepSpeed 默认的 stage 2 用 all-reduce。Stage 3 用的是同一个类，它的桶按反向传播完成各模块的先后装填；它的参数
（`zerolab/zero/stage3/gather.py`）通过 `grads_done(g)` 得到通知，一个模块的梯度全部到齐后，就把这个模块收集来的参数重新切回分片。

思考题：

1. 梯度累积为 4 时，stage 2 每个优化器步做几次 reduce-scatter，stage 1 会做几次？（第 3 章两种做法都测过。）
2. 为什么每个 rank 都必须按同样的顺序发出各个桶，哪怕某个 rank 的桶早一点装好？
3. 在 fp16 下，为什么要先除再加，而不是加完再除？

检查程序让它的 rank 一直运行着；做完之后把它们停掉：
"""),
}
