"""第 8 章「生产环境里的 ZeRO-3」两部分（08、08b）与练习 8 的中文（tools/build_notebooks/ch08.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。英文改动后哈希对不上，
tests/test_zh_edition.py 会点名该单元格；改好中文后运行
``python tools/build_notebooks/zh_edition.py --accept <单元格 id>``。

清单代码块里的注释用的是原始配置（中文）的注释；英文版把它们译成了英文。
"""

ZH = {
"ch08-00": ("2bdfe5138bb6", r"""
# 第 8 章 · 生产环境里的 ZeRO-3（一）：各个旋钮

*真正的搬家：一份别的搬家队用过的清单，先拿一栋小房子试一试。*

搬家队已经学会了每一招：把小本子分开（stage 1），把搬迁贴纸分开（stage 2），连家具本身也分开（stage 3）；只在某个房间干活时才把那间屋的家具取过来；
把厚厚的小本子存进仓库（卸载，offload）。现在，队长拿到了**另一支搬家队的清单**：他们说，自己就是用这份配置让 8 个工人搬完了一套
70 亿参数的家当。在把真正的搬家托付给它之前，队长先拿一栋小房子，把清单上的旋钮一个一个试过去，记下每个旋钮改变了什么。

| 故事里 | 训练中 | 配置键 |
|---|---|---|
| 没人费心收起来的小物件 | **常驻**参数（persistent parameters）：每个 rank 上都保留完整的一份 | `stage3_param_persistence_threshold` |
| 还没用到，就先把下一间屋的家具取过来 | **预取**（prefetch）：按记录下的顺序，在用到之前就发出 all-gather | `stage3_prefetch_bucket_size` |
| 门厅里同时能摆多少家具 | 预取的**活跃参数**（live parameters）预算 | `stage3_max_live_parameters` |
| “马上还要用的，就别搬回去” | **复用距离**（reuse distance） | `stage3_max_reuse_distance` |
| 文书一次只处理一个文件夹 | 优化器更新按**子组**（sub-group）分块进行 | `sub_group_size` |

这份清单（一份在 8 张 GPU 上训练 Llama-2-7B 的生产环境 ZeRO-3 配置，照发布时的原样，注释也是原文；逐个键存为 `configs/seed002_zero3_offload.json`）：

```python
ds_config = {
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": 5e8,                   # 梯度归约桶大小
        "stage3_prefetch_bucket_size": 5e8,          # 参数预取桶大小
        "stage3_param_persistence_threshold": 1e5,   # 小参数不分片
        "stage3_max_live_parameters": 1e9,           # 同时在 GPU 上的最大参数量
        "stage3_max_reuse_distance": 1e9,            # 参数复用距离
        "offload_optimizer": {"device": "cpu", "pin_memory": True},   # CPU Offload（可选）
        "offload_param": {"device": "cpu", "pin_memory": True},
        # 通信优化
        "sub_group_size": 1e8,
        "round_robin_gradients": True,
    },
    "gradient_accumulation_steps": 4,
    "train_batch_size": 128,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
}
```

**本章要测的**，在 2 个 rank 上：常驻、预取、活跃参数预算、复用距离和 `sub_group_size` 各自改变了什么（all-gather 调用次数、字节数、
提前收集的组数、同一时刻收集的元素数峰值），又有什么保持不变（模型算出的每一个数）。每条规则都是 DeepSpeed 0.19.8 的，并注明它在哪个文件里。
**第二部分**（[`08b_the_launch.ipynb`](08b_the_launch.ipynb)）把清单的每个键与 DeepSpeed 真正的默认值逐一对照，核对它的调参表，然后启动它。
"""),
"ch08-02": ("e6a2f7f926ed", r"""
## 1. 先拿小房子试清单

我们的房子：一个由 8 个 `Linear(64, 64)` 层组成的 MLP，即 8 个 4,096 元素的权重和 8 个 64 元素的偏置（Ψ = 33,280 个参数），跑在 2 个 rank 上。
`zerolab.course.knobs.measure` 在每个 rank 上训练几步，读取**最后**一步（那时模块的顺序已经记录下来，预取已经打开）：参数收集，
即为某个模块收集的每个参数分区，以及更新之后对常驻参数的刷新；承载它们的 all-gather 调用（`engine.ledger.records` 里的 `params ...`）及其字节数；
最后从 `engine.stage3_stats()` 读出在用到之前就收集的分区（预取），以及同一时刻已收集或在途的参数元素数的最大值。
Stage 3 和 DeepSpeed 一样，把**每个参数**单独分区（即它的 `ds_tensor`）：一个权重和一个偏置是两个分区，各自填充到 N 的倍数，各自决定是否常驻。
（在 stage 3，zerolab 还会发送自己的 16 字节顺序检查，让走了不同路径的 rank 报错而不是卡住；DeepSpeed 不发这些。
账本把它们单独记在 `engine.ledger.checks` 里，这里的数字都不包括它们。）

**先预测，再运行。** 原封不动的清单（外加一个 Adam 优化器，清单把它留给训练脚本去定），用在这个 MLP 上：前向和反向每步会做多少次参数 all-gather？
每个 rank 持有多少字节的参数？把你的猜测写下来。
"""),
"ch08-04": ("98f160954cdf", r"""
**一次也没有。** 这个模型的每个参数最多只有 10⁵ 个元素，所以在清单（也是 DeepSpeed 默认）的常驻阈值之下，它们全都是常驻参数，即以 fp16 完整地保留在每个 rank 上，前向和反向中从不收集；每步更新之后再做 all-gather，让每个 rank 上的副本都拿到更新——
**每个参数一次调用**，共 16 次（DeepSpeed 的 `_post_step` 把常驻参数逐个收集）。在小模型上，默认设置下的“ZeRO-3”对参数的处理和 stage 2 一样，因为这个阈值是按 7B 模型定的，而在 7B 模型里，只有 LayerNorm/RMSNorm 的权重（4,096 个元素）低于它。优化器状态
和梯度仍然是分片（sharded）的；这里开了 `offload_optimizer`，优化器状态放在主机内存里。`gradient_accumulation_steps` 为 4 时，4 个微批次中每一个结束后都要对梯度做一次 reduce-scatter，这是 stage 2/3 的做法（第 6 章）：
每个 `reduce_bucket_size` 大小的模块桶调用一次，而清单的 5·10⁸ 能把整个模型装进一个桶。两次 all-reduce 是 DeepSpeed 在 stage 3 发送的小集合通信
（`zerolab/zero/norms.py`）：开了 fp16 时，先是 1 字节的溢出标志（`overflow`），再是梯度范数，作为一次 8 字节 fp64 的求和（`grad`）。

## 2. 常驻：哪些参数从不出门

从这里开始，每次运行都把 `stage3_max_reuse_distance` 设为 0（`measure` 的默认）；第 5 节再测 DeepSpeed 的默认值，它在这么小的模型上会改变很多东西。
本节和第 5 节还关掉了预取（`stage3_prefetch_bucket_size` 为 0）：只有这样，DeepSpeed 才会让每个模块每次用完立即释放、反向时再收集一次，
这是论文里的调度方式，每个旋钮的效果也才能单独显现。（打开预取时，即使复用距离为 0，DeepSpeed 也会留着预取器看过的参数：见第 3 节。）

**先预测，再运行。** `stage3_param_persistence_threshold` 取 0、64、4,096 和 10⁵ 时（再加上 10⁵ 配 `stage3_model_persistence_threshold` 8,192，
它给常驻元素的*总数*设了上限）：哪些参数是常驻的，一步做多少次参数 all-gather，搬多少字节？（规则是 DeepSpeed 的 `mark_persistent_parameters`，
在 `parameter_offload.py` 里，逐个参数判断：`numel <= threshold` 时常驻；总数上限按模型里参数的顺序往里填。）
"""),
"ch08-06": ("ab8f88e9463d", r"""
- **0**：没有常驻参数；16 个参数每个都在前向收集一次、反向再收集一次，共 32 次收集（一个模块的权重和偏置在同一次调用里传输，所以是 16 次调用），
  266,240 字节（按 fp32 计的 Ψ，两遍；stage 3 的“3Ψ”就是这 2Ψ 加上 reduce-scatter）；每个 rank 持有半个模型，66,560 字节。
- **64**：8 个偏置常驻。权重收集 16 次，外加更新之后对 8 个偏置的 all-gather，**每个一次调用**（DeepSpeed 的 `_post_step`）：共 24 次。
  每个 rank 持有自己那一半权重外加全部偏置，多出 1,024 字节。
- **4,096 和 10⁵**：全部常驻，每步 16 次 all-gather，每个参数一次，全都在更新之后，把整个模型收集一遍（133,120 字节），每个 rank 持有整个模型。
- **总数上限**（8,192 个元素）：按模型里的顺序往里填，第一个权重和全部 8 个偏置放得下（4,096 + 512），第二个权重放不下，于是 9 个常驻，7 个权重各收集两次。

这是拿显存（device memory）换调用次数：常驻省掉了许多次小收集（每次都要付一个 α，第 6 章），代价是每个 rank 上都多占显存。在 7B 模型里，
不到 10⁵ 个元素的参数就是那些 norm 权重，约占模型的 0.004%：每步把它们收集 2 × 65 次，在延迟上的花费远大于常驻所占的显存（何况更新之后的刷新仍然是 65 次小调用）。

## 3. 预取：按记录下的顺序，提前收集

第一步时，DeepSpeed（zerolab 也一样）会记录各模块收集参数的顺序。从第二步开始，DeepSpeed 的规则（`partitioned_param_coordinator.py`
里的 `fetch_sub_module`）如下。在**每个模块取参数**（fetch）时，包括自身不带参数的模块（这里是根模块 `MLP`），按记录下的顺序，
对接下来那些既未收集、也不在途的参数发出一次异步 all-gather，这就是一次**补充预取**（top-up）。补充预取从轨迹（trace）的队列里逐条弹出条目
（每条是一个参数和用到它的那次取参数，前向、反向都有），只要已取的元素数还少于

    min(stage3_max_live_parameters - available, stage3_prefetch_bucket_size)

就继续弹出，其中 *available* 计的是已收集或在途的元素（越过上限的那个参数也会被取走）。之后，需要某个参数的模块就等它传到，而不再自己去收集。

这个循环里还有一行会影响字节数。预取器弹出的每一条，不管是取走了，还是因为已经收集而跳过，都会被标记为**为**那次之后的使用**而取**
（`__most_recent_step_id_param_fetched_for`）；而释放规则（`__params_to_release`）不会释放一个被标记给未来某次使用的参数，
源码注释说的是：别释放那些复用被预取跳过的参数。所以，只要预取器看得足够远、看到了某个权重在反向里的使用，这个权重在前向之后就会一直保持收集状态，
**即使 `stage3_max_reuse_distance` 为 0**。

**先预测，再运行。** 偏置常驻（阈值 64），权重每个 4,096 个元素，`stage3_max_live_parameters` 为默认的 10⁹，复用距离为 0。
`stage3_prefetch_bucket_size` 取 0（关闭）、4,096（一个权重）、8,192（两个）、16,384（四个）和 DeepSpeed 的 5·10⁷ 时：
每步收集多少次权重、多少次 all-gather 调用、多少字节？反向还会再收集一遍权重吗？同一时刻已收集或在途的元素最多有多少？
"""),
"ch08-08": ("4711acea23f2", r"""
- **在 DeepSpeed 里，复用距离为 0 时，预取改变的不只是调用次数，还有字节数。** 关闭时，权重收集 16 次：每个权重前向一次、反向再一次
  （加上偏置的刷新共 264,192 字节）。5·10⁷ 时，根模块取参数时就弹出了整条轨迹，前向和反向都在内。它在**一次**调用里取走 8 个权重，
  并把每个都标记为给它在反向里的使用而取，于是没有一个在前向之后被释放，反向什么也不用再收集——权重收集 8 次，加上 8 次常驻刷新共 9 次调用，
  133,120 字节，减半。4,096 时每次补充预取只弹出一条；只有到了拐点，它才碰到某个权重在反向里的使用（最后一层的），于是这个权重留了下来：
  权重收集 15 次。8,192 和 16,384 弹得更远，留下的也更多（11 次和 9 次）。
- 调用次数：一次补充预取取走的参数在一次调用里传输（DeepSpeed 合并的 all-gather），等到各自的模块需要时再从中拷出来。
- **峰值：预取桶限制的是一次补充预取，而不是收集着的总量。** 被标记留下的参数一直保持收集状态，直到它在反向里被用到：从 8,192 起，
  拐点处整个模型（32,768 个元素）都处于收集状态。能限制预取添上去的量的只有 `stage3_max_live_parameters`（这里是 10⁹；见第 4 节）；
  预取整个模型时，stage 3 会在某一刻持有 stage 2 一直持有的东西。
- 复用距离为 0 而不预取时，反向会把每个权重再收集一遍：论文的 3Ψ。第二部分里，`zerolab compare` 把它和真正的 DeepSpeed 并排展示。

在 GPU 上，预取图的是**时间**：下一个模块的 all-gather 在自己的流上运行，与此同时这个模块在计算。在这颗 CPU 上，收集很便宜，核又是共享的，
所以能看出来的主要是省下的调用次数。每步的时间（在这里仅供参考）：
"""),
"ch08-10": ("ce2db45e616d", r"""
## 4. 活跃参数预算不是上限

**先预测，再运行。** 预取取 DeepSpeed 默认的 `stage3_prefetch_bucket_size`（5·10⁷），偏置常驻，`stage3_max_live_parameters` 取 0、1,000、4,096、
6,144、16,384 和 10⁹。1,000 比单个权重（4,096）还小：峰值是多少，有没有预取任何东西？6,144，即一个半权重时呢？
"""),
"ch08-12": ("426462c74b31", r"""
有两件事让这个预算算不上上限，两者都是 DeepSpeed 的规则。其一，一个模块自己的参数总会被收集，不管预算是多少：取当前模块的参数从不受阻，
受限的只有预取。其二，一次补充预取会在额度 `max_live − available` 还没用完时一直取参数，**越过额度的那一个也算在内**：什么都没收集时
（available 为 0），任何大于 0 的预算，哪怕是 1,000，都会预取一个完整的权重（这里每步两次）；6,144 时，每次补充预取取走两个权重，而额度只允许一个半。
只有预算为 0 才会彻底关掉预取。所以一个 rank 同时持有的已收集或在途的参数，低于预算加上最大的那个参数（如果当前需要的那个模块更大，则是它），
再加上复用和预取器的标记保留下来的部分（第 3 节、下一节）：按清单的 10⁹，在 fp16 的 7B 模型上，每张 GPU 约有 2 GB 收集来的参数，这还不算 1.75 GB 的分片。
调用次数随预算能覆盖的范围而下降，原因和第 3 节一样：弹出了某个权重反向使用的补充预取，会让它保持收集状态（0 和 1,000 时 24 次调用，10⁹ 时 9 次）。

## 5. 复用距离：马上还要用的，就别搬回去

一个模块的前向结束时，它的每个参数都是释放的候选。DeepSpeed 的规则（`partitioned_param_coordinator.py` 里的 `__params_to_release`），
zerolab 也照此执行：从下一次使用开始，沿记录下的顺序往后走，经过前向剩下的部分*以及紧随其后的反向*，累加途经各模块的元素数，
直到走过 `stage3_max_reuse_distance` 个元素为止；途中遇到的候选参数**保持收集状态**。最显而易见的受益者：前向的最后几个模块，正是反向的头几个。
只有按已记录的顺序进行的那一遍才会保留东西（第 1 步负责记录），而且反向结束时会释放一切：优化器更新马上就要改动各个分片了。

**先预测，再运行。** 偏置常驻，关闭预取（这样能留下东西的只有复用距离），复用距离取 0、4,096、16,384 和 DeepSpeed 的 10⁹（比整个模型还大）：每步的收集次数、字节数和峰值各是多少？
"""),
"ch08-14": ("d55cc89b4458", r"""
同一条规则，在距离为 0 时记录下的顺序（一步里的参数 all-gather，预取关闭）上**重放**（`zerolab.course.knobs.replay`）：这是放在测量旁边的一次计算，两者必须一致。
"""),
"ch08-16": ("89b2bc8017e8", r"""
距离为 0 时，每个模块每次用完都释放：权重收集 16 次（加上偏置的刷新共 24 次），一次一个权重，也就是 stage 3 的“3Ψ”。
4,096 让最后一层跨过前向转反向的拐点一直留着（权重收集 15 次）。清单的 10⁹ 比整个模型还大，让**所有**参数从第一次使用到最后一次使用都保持收集状态，
于是权重收集 8 次，字节数减半（这时 stage 3 搬的是 2Ψ，即收集 Ψ、reduce-scatter Ψ），整个模型同时处于收集状态。这就是 DeepSpeed 在小模型上的默认行为
（第 3 节也看到了：即使距离为 0，它的默认预取也会这样）。换成大模型呢？

**先预测，再运行。** Llama-2-7B（hidden 4,096，MLP 11,008，32 层，词表 32,000；每个 `Linear` 和嵌入层各算一个模块，norm 权重常驻）：
226 个模块，距离为 0 时每步 452 次收集。清单的 10⁹ 能省掉多少次？
"""),
"ch08-18": ("c25ce01d63b2", r"""
用清单的 10⁹，DeepSpeed 会跳过前向末尾 13 个模块的再次收集：它们的下一次使用（在反向里）落在 10⁹ 个元素之内，大约是最后两层加输出头。
这不到一步参数 all-gather 总数的 4%，代价是拐点处收集来的参数峰值约为五亿个元素（fp16 下 1 GB）。（这是在一个简化的顺序上重放规则，
略去了 norm，也略去了预取：弹出了某个模块反向使用的预取器也会把它留下，见第 3 节；并不是对 DeepSpeed 的测量。）注意，`stage3_max_live_parameters` **不**限制这种保留，DeepSpeed 和 zerolab 里都是如此；它只限制预取。

## 6. 归在“通信优化”下的两个键：`sub_group_size` 和 `round_robin_gradients`

清单把这两个键归在“通信优化”名下。**先预测，再运行。** Stage 3，`offload_optimizer` 放在 CPU 上，`sub_group_size` 取 10⁸（清单的值）对比 4,096，
再打开 `round_robin_gradients`：账本会变吗？训练出来的数呢？
"""),
"ch08-20": ("2e4fbd6e0b69", r"""
两个键都不发送任何东西。`sub_group_size` 只改变主机端优化器更新的切法（1 个子组，或 4,096 时的 8 个：时间线上主机端更新的那几条；zerolab 在子组快要超过
4,096 个元素之前就把它合上，所以每个权重分片和它的偏置组成一个子组，而 DeepSpeed 的 `_create_fp16_sub_groups` 要等子组达到这个大小才合上，
越过的那个参数也算在内，这里会是 5 个），
它限制的是更新时的工作内存，即一块里的 fp32 副本、Adam 的矩和梯度，放在主机内存里或从 NVMe 流式读入。DeepSpeed 只在 stage 1 和 2
读取 `round_robin_gradients`（`stage_1_and_2.py`）；它的 stage 3 根本不读。zerolab 在哪个 stage 都接受它，但什么也不改变（它只决定哪个 rank 拥有哪个梯度，
从不改变任何一个数）。

## 本章测得的
"""),
"ch08-22": ("ca88da7836ed", r"""
- **常驻**用每个 rank 上的显存换掉许多次小收集；默认的 10⁵ 让小模型全部常驻，于是“ZeRO-3”对参数的处理和 stage 2 一样
  （每步更新之后还要刷新它们，每个参数一次 all-gather）。
- **预取**让收集更早、all-gather 调用更少、收集来的参数峰值更高；在 DeepSpeed 里它还会**改变字节数**：预取器弹出过的参数被标记为给之后的使用而取，
  不会被释放，所以复用距离为 0 时，用 DeepSpeed 默认的预取，反向什么也不再收集（这里字节数减半）。不预取时，反向会再收集一遍。
  `stage3_prefetch_bucket_size` 限制的是一次补充预取；每个模块取参数时都会再补充预取一次。
- **`stage3_max_live_parameters`** 限制的是预取，而不是显存：模块自己的收集总会发生，越过预算的那一组也会被取走。
- **复用距离**让参数跨过前向转反向的拐点保持收集状态；DeepSpeed 的 10⁹ 在小模型上会保留全部（2Ψ 而不是 3Ψ，整个模型同时在手）；
  在 Llama-2-7B 上只省下百分之几的收集。
- `sub_group_size` 和 `round_robin_gradients` 都不是通信设置。
- 没有哪个旋钮会改变模型算出的任何一个数。

## 思考题

1. 第 3 节里，`stage3_prefetch_bucket_size` 为 8,192（两个权重）时，权重收集 11 次，用了 14 次调用。按取参数的顺序走一遍轨迹
   （根模块，第 0 到第 7 层，然后是反向）：每次补充预取弹出了哪些条目，把哪些反向使用标记成了“为之而取”？于是哪些权重只收集了一次？
   然后把 `stage3_max_live_parameters` 也设为 8,192，预测调用次数和峰值。
2. 把 `stage3_model_persistence_threshold` 设为 4,608，重跑第 2 节。先预测哪些参数常驻。
3. 对 Llama-2-7B，`stage3_max_reuse_distance` 取多少，恰好只让最后一层 MLP 的 `down` 投影跨过拐点留下来，别的都不留？用 `replay` 验证。
4. 在 8 张 GPU 上用这份清单，一张 GPU 在前向转反向的拐点处最多会持有多少字节收集来的参数（算上预取、当前模块和复用）？
   如果 GPU 在那里显存不足，你会先调低哪个键？

**接下来：** 第二部分 [`08b_the_launch.ipynb`](08b_the_launch.ipynb) 把清单逐行与 DeepSpeed 的默认值对照，然后启动它。
**轮到你了：** 在 [`exercises/zh/08_stage3_knobs.ipynb`](../../exercises/zh/08_stage3_knobs.ipynb) 里，你来选择预取、常驻、活跃参数和复用的取值，
达成三个给定的目标（每步的 all-gather 调用次数、同一时刻收集的元素数峰值、在默认的 `stage3_prefetch_bucket_size` 下不做任何预取），
检查程序会在 2 个 rank 上用真实的引擎运行你的取值。
**动手搭：** 在 [`exercises/zh/08c_gather_hooks.ipynb`](../../exercises/zh/08c_gather_hooks.ipynb) 里，你亲手把 stage 3 的收集与释放写成模块钩子（module hooks），
检查程序在引擎内部、在一个带共享权重和外部权重的模型上检查它。
"""),
"ch08b-00": ("300e5284faf1", r"""
# 第 8b 章 · 生产环境里的 ZeRO-3（二）：逐行读清单，然后启动

*信它之前，先把每一行读一遍；然后照另一支搬家队的做法开始搬。*

在第一部分（[`08_zero3_in_production.ipynb`](08_zero3_in_production.ipynb)）里，队长拿一栋小房子把清单上的旋钮一个一个试过了。
真正搬家之前还剩两件事：把清单的**每一行**都读一遍（有的是把 DeepSpeed 的默认值照抄出来，有的抄自一份旧手册，还有两行归错了类），
核对它那张“推荐值”**调参表**；然后照另一支搬家队的做法**启动**搬家，用启动器在每个设备上启动一个工人。

清单就是 `configs/seed002_zero3_offload.json`（第一部分展示了它发布时的原样）。它的启动命令：
`deepspeed --num_gpus=8 train.py --deepspeed ds_config_zero3.json --model_name meta-llama/Llama-2-7b-hf --per_device_train_batch_size 4 --gradient_accumulation_steps 4`。
它的调参表：`reduce_bucket_size` 5e8-1e9，`stage3_prefetch_bucket_size` 5e8-1e9，`stage3_max_live_parameters` 1e9-2e9，
`stage3_param_persistence_threshold` 1e5。

**这里要做的：** 把每个键与 DeepSpeed 0.19.8 真正的默认值（取自它的源码`deepspeed/runtime/zero/config.py`、`offload_config.py`）
以及 zerolab 读到的值并排对照；问问 `zerolab explain` 这份配置在 8 个 rank 上会做什么；在小房子上测一测调参表给的值；用 `zerolab train` 运行这份配置；
最后在 `torchrun` 下用 zerolab 跑一个 DeepSpeed 训练脚本，只改一行。
"""),
"ch08b-02": ("72ae750f68c9", r"""
## 1. 逐个键读清单

`zerolab.course.knobs.checklist_rows` 把清单里每个键的值，与 DeepSpeed 0.19.8 的默认值（读自源码，而不是文档页面：两者有几处不一致，
文档说 `stage3_prefetch_bucket_size` 是 5e8，代码里是 5e7），以及 zerolab 的 `load_config` 按 8 个 rank 从文件里读到的值并排列出。

**先预测，再运行。** 除了 `stage: 3`，清单里其余 13 个 `zero_optimization` 键中，有几个与 DeepSpeed 在 stage 3 下的默认值不同？是哪几个？把你列出的写下来。
"""),
"ch08b-04": ("a2f049c97144", r"""
有五行与 DeepSpeed 的默认值不同（其中 `round_robin_gradients` 在 stage 3 根本不会被读取）；其余的都只是把默认值写了出来。每一行做什么，清单又错在哪里：

- `overlap_comm: true`、`contiguous_gradients: true`、`reduce_bucket_size: 5e8`、`loss_scale: 0`、`initial_scale_power: 16`：
  **全是 DeepSpeed 在 stage 3 下的默认值。** 写出来什么也不改变（无害，也算写明了意图）。`reduce_bucket_size` 的单位是**元素**：
  5·10⁸ 个 fp16 梯度就是一个 1 GB 的桶（第 6 章）。
- `stage3_prefetch_bucket_size: 5e8`，注释“参数预取桶大小”：一批**预取**（top-up）最多能提前 all-gather 多少个参数元素。DeepSpeed 的默认值是 **5e7**，
  不是 5e8：文档页面写的是 5e8，清单照抄了它；代码里多年来一直是 5e7。每个模块取参数时，DeepSpeed 预取一批：按记录下的顺序取接下来的模块，
  只要已取的元素数还少于 min(这个值, `stage3_max_live_parameters` − 已收集或在途的量) 就继续取（越过上限的那个模块也会被取走）。
  它限制的是一批预取，而不是在途的总量（第一部分第 3 节）。
- `stage3_param_persistence_threshold: 1e5`，注释“小参数不分片”：**只对了一半**。不超过 10⁵ 个元素的参数，它的 16 位副本在每个 rank 上都完整保留，
  前向和反向中从不收集；但它的梯度和优化器状态仍然是分片的，而且每步之后都要 all-gather 一次，好让每个 rank 上的副本拿到更新（第一部分第 2 节）。
- `stage3_max_live_parameters: 1e9`，注释“同时在 GPU 上的最大参数量”：**不是上限。** 它只限制*预取*能额外加进来多少：模块自己的收集总会发生，
  越过预算的那个模块也会被取走（第一部分第 4 节）。
- `stage3_max_reuse_distance: 1e9`：如果一个参数在记录的顺序里往后这么多个**元素**之内还会再用到，就让它保持收集状态（第一部分第 5 节，在小模型上就是全部）。
- `offload_optimizer` / `offload_param` 加 `pin_memory: true`：优化器状态和参数分片放在 CPU 内存里（第 5 章）。DeepSpeed 0.19.8 里 `pin_memory` 默认就是 true。
- **归错了类、放在“通信优化”下面的：** `sub_group_size` 给**优化器更新**分块（一次更新 rank 分片里的多少个元素，在卸载时限制 CPU/NVMe 上的工作内存）；
  它什么也不发送。`round_robin_gradients` 重新安排哪个 rank 拥有哪个梯度，**只在 stage 1 和 2** 起作用，用来分散卸载时从设备到主机的拷贝；
  DeepSpeed 的 stage 3 从不读它（zerolab 在这里把它读成 false）。第一部分第 6 节把两者都测了。

`zerolab explain` 对任何 DeepSpeed 配置都能给出同样的说明。这里用清单自己的数字、8 个 rank 和一个 7B 模型来运行：
"""),
"ch08b-06": ("901e320b5c3a", r"""
## 2. 核对调参表

调参表推荐 `stage3_prefetch_bucket_size` 取 5e8-1e9，是 DeepSpeed 默认值的十到二十倍；`stage3_max_live_parameters` 取 1e9-2e9。
第一部分在小房子上测过这条规则（8 个 4,096 元素的权重，偏置常驻，复用距离为 0）；这里让调参表的值走一遍同样的测量（`zerolab.course.knobs.measure`，2 个 rank）。

**先预测，再运行。** 在小房子上，预取取 0、DeepSpeed 的 5e7 和调参表的 5e8 时：每步的 all-gather 调用次数和收集元素的峰值各是多少？
5e8 相比 5e7 会改变什么吗？活跃参数预算取 1,000，远低于调参表的 1e9 时，峰值又是多少？
"""),
"ch08b-08": ("6f6fdd73fb76", r"""
在小房子上，5e8 和 5e7 没有区别。两者都在根模块取参数时弹出整条轨迹，在一次调用里取走 8 个权重，并把每个都标记为给它在反向里的使用而取，
所以即使复用距离为 0，DeepSpeed 也一个都不会在前向之后释放——加上 8 个偏置的刷新（每个一次），共 9 次调用、133,120 字节；
关闭预取时则是 24 次调用、264,192 字节，反向会把每个权重再收集一遍（第一部分第 3 节）。5e7 和 5e8 的差别只在大模型上才显现：

- `stage3_prefetch_bucket_size` 5e8-1e9：在 7B 模型上，5·10⁸ 个元素相当于一批预取拿走两层半，fp16 下约 1 GB，而且每个模块取参数时都要再预取一批，
  在途的总量只受 `stage3_max_live_parameters`（1e9，五层）限制。这换来了什么（收集次数更少、更早，重叠更多），又付出了什么
  （收集来的参数峰值随预取桶增长，直到变成整个模型），正是小房子上显示的。
- `stage3_max_live_parameters` 1e9-2e9：是给预取的预算，不是显存的上限。预算为 1,000 时，仍然会收集一个 4,096 元素的模块。
- `reduce_bucket_size` 5e8-1e9：默认值已经是 5e8。更大的桶用更少的调用发送同样的字节（第 6 章），但每个桶都要占一块缓冲区：在 stage 3，
  DeepSpeed 每种 dtype 用一块桶缓冲区来装（它唯一的那块 IPG 缓冲区；stage 1-2 开 `overlap_comm` 时保留两块），5e8 时 fp16 下是 1 GB。
- `stage3_param_persistence_threshold` 1e5：这是默认值，对 7B 来说也合理（只有 norm 权重落在它下面）；在小房子上它让每个参数都常驻，
  每步 16 次调用，更新之后逐个刷新每个参数。

时间（更大的预取桶能让 8 张 GPU 上真实的 7B 训练步快多少）在 2 核 CPU 上无法验证：调参表也没有给出任何测量。同一来源里卸载的那几行
（4 张 A100-40GB 上跑 70B，训练速度“约 35%”）在第 5 章核对过：70B 需要 1,120 GB 的模型状态，比表里任何一行的 CPU 内存都多。

### 与真正的 DeepSpeed 并排：`zerolab compare`

到这里为止的每个数字都是 zerolab 测的。`zerolab compare CONFIG.json` 把同一份配置分别交给**真正的 DeepSpeed 0.19.8**
（它的 CPU 版本，在 `torchrun` 下用 gloo 运行）和 zerolab，用同样的模型和数据，把稳定阶段（第 3 到 5 步）的集合通信并排打印出来。
下面是一次记录下来的运行（读它不需要 DeepSpeed；两份配置和完整输出，包括损失，都在 `benchmarks/results/compare/` 里），用的是 `--model mlp`，
即一个由 4 个 `Linear(284)` 和 3 个 `LayerNorm` 组成的残差 MLP（Ψ = 325,464，fp32 下 1.30 MB），2 个 rank，stage 3，
`stage3_max_reuse_distance` 为 0，`stage3_param_persistence_threshold` 为 0，先用 DeepSpeed 默认的预取（5e7），再把 `stage3_prefetch_bucket_size` 设为 0：

```
$ zerolab compare zero3_prefetch_reuse0.json
  family           zerolab calls        bytes  DeepSpeed calls        bytes   verdict
  all_gather                   1    1,301,856                1    1,301,856   ok
  reduce_scatter               1    1,301,856                1    1,301,856   ok
=> the same calls and bytes

$ zerolab compare zero3_no_prefetch_reuse0.json
  family           zerolab calls        bytes  DeepSpeed calls        bytes   verdict
  all_gather                  14    2,603,712               14    2,603,712   ok
  reduce_scatter               1    1,301,856                1    1,301,856   ok
=> the same calls and bytes
```

两边的调用次数和字节数完全相同。用 DeepSpeed 默认的预取时，**一次** all-gather 就搬完了整个模型（Ψ 一遍，1.30 MB）：
预取器在第一次取参数时就弹出了整条轨迹，把每个参数都标记为给它在反向里的使用而取，所以即使复用距离为 0 也什么都不释放，反向什么也不再收集。
关掉预取，同一份配置做 14 次 all-gather，字节数翻倍（2.60 MB）：每个模块前向收集一次、反向再收集一次，加上 reduce-scatter 就是论文的 3Ψ。
在 DeepSpeed 里，预取会改变字节数。（保存下来的文件里，两边的损失在四到五位有效数字上一致：两种实现，同样的算术，运算顺序不同。）

想亲自用你自己的配置运行，在装了 zerolab 的 Python 环境里：

```
DS_BUILD_OPS=0 pip install 'zerolab[deepspeed]'     # DeepSpeed 0.19.8，只用 CPU，不编译算子
zerolab compare my_config.json                        # --world 3, --model tied, --steps 6
```

没装 DeepSpeed 时，它会告诉你怎么装；`--ds-python /path/to/venv/bin/python` 可以用另一个环境里的 DeepSpeed。某一类集合通信的调用次数或字节数不一致时，它以 1 退出。

## 3. 启动命令，以及它在这里的对应写法

清单的启动命令 `deepspeed --num_gpus=8 train.py --deepspeed ds_config_zero3.json ...` 在一台机器上启动 8 个进程，每个进程的环境变量里带着自己的 rank，
`train.py` 调用 `deepspeed.initialize`。（`--model_name`、`--per_device_train_batch_size` 和 `--gradient_accumulation_steps` 是脚本自己的参数，
Hugging Face Trainer 的风格；配置里的 `train_batch_size` 128 = 4 × 4 × 8，必须与它们一致。）在这台机器上的同样做法：

| DeepSpeed | zerolab |
|---|---|
| `deepspeed --num_gpus=8 train.py --deepspeed_config ds.json` | `torchrun --nproc_per_node 2 train.py --deepspeed_config ds.json`（配合 `import zerolab.deepspeed as deepspeed`） |
| （没有内置的训练器） | `zerolab train --config ds.json --nproc 2`（一个小模型，数据现场生成） |

`zerolab train` 运行一份与清单思路一致的配置（stage 3、fp16、优化器卸载、预取取 DeepSpeed 的默认值、关闭常驻好让这个小模型的参数真的要传输），
2 个 rank，6 步，每步 2 个微批次。

**先预测，再运行。** 这 6 步里，rank 0 的账本会显示多少次 all-reduce、多少次 reduce-scatter？（stage 3 在每个微批次都对梯度做 reduce-scatter，
每个 `reduce_bucket_size` 桶一次调用，默认 5·10⁸ 个元素；每步还发送 DeepSpeed 的小 all-reduce：stage 3 开 fp16 时，
先是 1 字节的溢出标志，再是梯度范数，作为一次 8 字节 fp64 的求和。）
"""),
"ch08b-10": ("485e674a8e07", r"""
12 次 all-reduce（每步两次，即溢出标志 1 字节、梯度范数 8 字节，共 54 字节）和 12 次 reduce-scatter（每个微批次一次，因为这个模型装得进一个桶）。all-gather 是 stage 3 的参数收集。
第一个微批次运行时还没有记录任何顺序：逐个模块收集，每个模块一做完就释放它的参数，前向一次、反向再一次，共 20 次调用；
单是共享权重的嵌入层就收集了四次，前向和反向里各为它自己和输出头收集一次（DeepSpeed 在每个模块的反向之后释放它的参数）。
从第二个微批次起，预取按记录下的顺序进行（先是根模块，其余的在一批预取里），而复用距离取 DeepSpeed 的默认值 10⁹，
让所有参数从前向到反向一直保持收集状态：每个微批次 2 次调用，所以是 20 + 11 × 2 = 42 次。（损失、学习率和时间这几行的数字用 `#` 遮住了：它们取决于 CPU。
显存和通信量那几行是精确的。）它保存下来的图（每步的损失和学习率、按集合通信分类的每步字节数、每个 rank 的显存）：
"""),
"ch08b-12": ("7f5b7730e213", r"""
## 4. 一个 DeepSpeed 脚本，只改一行

下面是一个照 DeepSpeed 自家示例的写法写成的训练脚本：`argparse` 配 `deepspeed.add_config_arguments`（`--deepspeed`、`--deepspeed_config`），
用 `args`、`model`、`model_parameters` 和 `training_data` 调用 `deepspeed.initialize`，返回四元组（引擎、优化器、数据加载器、调度器），
再用 `engine.backward` / `engine.step`。先读一遍；下一个单元格只改一行，把 `import deepspeed` 换成 `import zerolab.deepspeed as deepspeed`，
然后在 `torchrun` 下用 2 个 rank 运行它，配置是第 3 节那份（fp32），外加一个预热（warmup）学习率调度器。
"""),
"ch08b-14": ("9302e67f0c8c", r"""
**先预测，再运行。** 64 个样本，2 个 rank，每个 rank 的微批次为 4，每个优化器步累积 2 个微批次，3 个 epoch：每个 rank 的数据加载器每个 epoch
给出多少个微批次？结束时引擎会数到多少个优化器步？
"""),
"ch08b-16": ("c9782b0dffc7", r"""
脚本并不知道自己不是跑在 DeepSpeed 上：四元组、按 rank 切分的数据加载器（64 个样本，2 个 rank，微批次 4，即每个 rank 每个 epoch 8 个微批次）、
2 个微批次的梯度累积（24 个微批次，12 个优化器步）、调度器以及 stage 3 的参数收集，全都来自配置。唯一专属于 zerolab 的是
`getattr(model_engine, "ledger", None)` 那一段，在 DeepSpeed 上运行时会跳过：它列出每种集合通信的调用次数和字节数，数字精确，在每台机器上都一样。

## 5. DeepSpeed 自己打印什么

真正搬家时，搬家队用 DeepSpeed 自己的话汇报，队长得看得懂。有三样输出要紧：`ds_report`（编译了什么、能编译什么）、每 `steps_per_print` 步打印一次的
进度和吞吐行，以及开启 `wall_clock_breakdown: true` 时 rank 0 的计时器。它们是从 DeepSpeed 0.19.8 本身录下来的（CPU 构建，2 个 rank 走 gloo，stage 2，
325k 参数的基准 MLP，30 步，每个 rank 微批次 32），连同机器和日期保存在 `benchmarks/results/recorded/` 里；`zerolab.tools.dslog` 负责读取它们。
其中没有 `nvidia-smi`：录制时没有 GPU 可用，课程也不会编造一份。（在 GPU 上，它的“Memory-Usage”一栏是 CUDA 分配器保留的显存加上每个进程的
CUDA 上下文，所以读数比 DeepSpeed 的 `MemAllocated` 高。）

**先预测，再运行。** 吞吐行报告的是 `CurrSamplesPerSec`。录下的那次运行有 2 个 rank，每步每个 rank 32 个样本。这个数字是一个 rank 每秒处理的样本数，
还是整个搬家队的？在 fp32 运行里，`skipped` 会显示什么？
"""),
"ch08b-18": ("89678a485bea", r"""
DeepSpeed 的 `ThroughputTimer` 构造时用的是 `batch_size = train_batch_size`（微批次 × 累积步数 × rank 数，这里是 32 × 1 × 2 = 64），
按 rank 0 的时钟计时，所以每秒样本数是**整个搬家队**的，而不是一个工人的。要得到每张 GPU 的数字，得除以 rank 数。`RunningAvgSamplesPerSec`
是到目前为止所有步的平均；`CurrSamplesPerSec` 只算最后一步（在这台繁忙的 2 核机器上，它能波动好几倍）。`skipped` 统计的是 fp16 损失缩放器在溢出后
丢掉的步数（第 4 章）；在 fp32 和 bf16 里它一直是 0。

**先预测，再运行。** 开启 `wall_clock_breakdown` 后，DeepSpeed 把 `bwd` 拆成 `bwd_inner`（autograd）和 `bwd_allreduce`（stage 1-2 的梯度归约，
即第 6 章的那些桶）。在两个走 gloo 的 CPU rank 上，两者哪个更大？
"""),
"ch08b-20": ("a22886a19720", r"""
反向传播里一半以上的时间是梯度归约：在走 gloo 的 CPU rank 上，归约没有被藏起来（第 6 章测过原因），而在开了 `overlap_comm` 的 GPU 上，
它大部分在 NCCL 自己的流上、躲在 autograd 后面运行，`bwd_allreduce` 只剩下暴露在外的那部分。zerolab 里与之对应的是引擎的时间线
（`engine.timeline.summary()`：计算、暴露的通信和被藏起来的通信），而它的账本还能数出 DeepSpeed 的计时器数不了的调用次数和字节数。

`ds_report` 在每台机器上的读法都一样。每个 op 的“installed”都是 NO，因为这个包是用 `DS_BUILD_OPS=0` 构建的：每个 op 在第一次用到时即时编译（JIT），
前提是它“compatible”。`async_io` 不兼容：它需要 `libaio`（`apt install libaio-dev`），没有它，**NVMe 卸载就跑不起来**（第 5 章那个设在磁盘上的仓库）。
`cpu_adam` 是 `offload_optimizer` 背后的主机端 Adam，它是兼容的，会在第一次用到时编译。zerolab 自己的 `zerolab report` 会为这台机器给出同类的一页：
在终端里运行它。

## 本章测得的
"""),
"ch08b-22": ("a78b0c6a3dae", r"""
- 清单大多是把 DeepSpeed 的默认值写了出来。它真正改动的是预取桶（5e8，代码里默认 5e7）、`sub_group_size`（1e8，默认 1e9）、卸载，
  以及 `round_robin_gradients`，而 stage 3 从不读最后这个。
- 调参表的预取值是 DeepSpeed 默认值的 10 到 20 倍：在 7B 模型上，每批预取要拿好几层，只受活跃参数预算限制，而这个预算本身限制的是预取，不是显存。
- `deepspeed --num_gpus=8 train.py` 为每张 GPU 启动一个进程；`torchrun` 做的是同样的事，DeepSpeed 脚本只改一行就能在 zerolab 上运行。
  `zerolab train` 端到端地运行一份配置。
- DeepSpeed 自己的话，从录制中读出：它的每秒样本数是整个搬家队的（每步 `train_batch_size` 个），`skipped` 统计 fp16 溢出跳过的步，
  `bwd_allreduce` 是没被藏起来的那部分归约，而 `ds_report` 里 `async_io` 那一行决定 NVMe 卸载能不能跑。

## 思考题

1. 清单里哪两个键删掉后，运行的任何行为都不会改变？如果 GPU 在前向转反向的拐点处显存不足，你会先把哪个键改回 DeepSpeed 的默认值？
2. 第 2 节里，给调参表的 5e8 找一个它能起作用的模型：小房子需要多少个 `Linear(64, 64)` 层，5e7 和 5e8 的预取才会不同？
3. 把第 4 节的脚本改成 ZeRO stage 2 再跑一遍。它的账本里哪些集合通信消失了，又出现了哪些？
4. 启动命令在 8 张 GPU 上传入 `--per_device_train_batch_size 4 --gradient_accumulation_steps 4`。如果配置里的 `train_batch_size` 写的是 64 而不是 128，
   配置隐含的每张 GPU 微批次是多少（`zerolab.load_config(config, 8)`）？为什么脚本的参数必须与配置一致？
"""),
"ex08-00": ("73309d166021", r"""
# 练习 8 · 调整参数收集：预取、常驻、活跃参数预算与复用

*同一栋小房子，三个目标；旋钮你来选，引擎来跑。*

第 8 章里，五个键在不改变模型算出的任何一个数的前提下，挪动了 stage 3 的参数收集：`stage3_param_persistence_threshold`（常驻阈值，
及其总量上限 `stage3_model_persistence_threshold`）、`stage3_prefetch_bucket_size`（预取，prefetch）、`stage3_max_live_parameters`（活跃参数，live parameters）
和 `stage3_max_reuse_distance`（复用距离，reuse distance）。这一次由你来选它们的取值去达成一个目标，就像给真实的训练调参那样；
检查程序会**在 2 个 rank 上用引擎运行你的取值**并测量。

模型：一个由 8 个 `Linear(64, 64)` 层组成的 MLP（8 个 4,096 元素的权重，8 个 64 元素的偏置），stage 3，2 个 rank，3 步；
以**最后**一步为准（顺序已记录，预取已打开）。

| 目标 | 最后一步必须满足 |
|---|---|
| **A** | 8 个偏置全部常驻，没有一个权重常驻 |
| **B** | 偏置常驻，参数 all-gather 调用最多 19 次（其中包括步后对 8 个偏置的刷新，每个一次），同一时刻已收集或在途的元素最多 18,432 个（4.5 个权重） |
| **C** | 没有权重常驻，`stage3_prefetch_bucket_size` 保持 DeepSpeed 的 5e7，并且在用到之前收集的组为 0 |

B 和 C 背后的规则是 DeepSpeed 的（第 8 章第 3、4 节）：每个模块取参数时（根模块也算），按记录下的顺序对接下来的组做一次 all-gather，
只要已取的元素数还少于 min(`stage3_max_live_parameters` − available, `stage3_prefetch_bucket_size`) 就继续取，**越过上限的那一组也算在内**
（available 是已收集或在途的量）。

写出 `knobs(goal)`：返回由这五个键组成的字典（没写的键保持 DeepSpeed 的默认值，即常驻阈值 1e5，无总量上限，预取 5e7，活跃参数预算 1e9，复用距离 1e9）。

`measure(knobs)` 用你的取值运行引擎，返回检查程序读取的量：`calls`（参数 all-gather 调用次数，取自 `engine.ledger.records`，只算 ZeRO 自己的；
zerolab 的 16 字节顺序检查单独记录，不计在内）、`prefetches`（在用到之前收集的组数）、`peak`（同一时刻已收集或在途元素的最大值）、
`persistent`（各个常驻参数的大小）和 `param_bytes`（每个 rank 的参数字节数）。用它来试各种取值。

**检查不通过时**，它会说明测得了什么、目标是什么，再给一条提示。想同时看到完整的回溯，
运行 `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，再运行一次检查单元格。
"""),
"ex08-02": ("872d67dc330d", r"""
**先预测，再运行。** 在这个模型上用 DeepSpeed 的默认值（一个空字典）：每步多少次参数 all-gather，有多少个常驻参数？
"""),
"ex08-05": ("b664116e6315", r"""
做检查之前，先试试你给目标 B 的取值（几秒钟）：
"""),
"ex08-07": ("4ccc46376022", r"""
**检查。** 你的三个答案，外加一次 DeepSpeed 默认值的运行，都在 2 个 rank 上：每个目标都在最后一步测量，训练出的参数逐位与默认值那次运行比较。
"""),
"ex08-09": ("eecfad2c66d1", r"""
## 它在 zerolab 里的位置

`make_units`（`zerolab/zero/stage3/units.py`）按模型里参数的顺序，逐个参数决定是否常驻；`GatheredParams.unshard_unit`（`zerolab/zero/stage3/gather.py`）、`top_up`
（用于自身不带参数的模块）和 `UnitFetch.plan`（`zerolab/zero/stage3/fetch.py`）沿着记录下的顺序，按 DeepSpeed 的预算取接下来的组。DeepSpeed 里对应的是
`mark_persistent_parameters`（`parameter_offload.py`）和 `fetch_sub_module`（`partitioned_param_coordinator.py`）。`UnitFetch.check_unit`，
即那个 16 字节的顺序检查，是 zerolab 自己的（DeepSpeed 不发；`"zerolab": {"order_checks": false}` 可以关掉它）。

思考题：

1. 目标 B 不止一个答案。找一个 `stage3_max_live_parameters` 为 16,384 的答案，再找一个 `stage3_max_reuse_distance` 不同的答案；
   说说调用次数和峰值为什么会那样变化。
2. 为什么在这里，`stage3_max_live_parameters` 取任何值，都不能把峰值压到 4,096 个元素以下？
3. 目标 C 里，`"stage3_prefetch_bucket_size": 0` 会不会是更简单的答案？为什么一个权重大小的预算（4,096）每步仍然会预取一次？
"""),
}
