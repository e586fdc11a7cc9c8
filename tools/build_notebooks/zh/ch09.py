"""第 9 章「一场完整的搬家」（综合实战）与练习 9 的中文（tools/build_notebooks/ch09.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。见 tools/build_notebooks/zhsource.py。
论文和书的标题保留英文原名，放在括号里。
"""

ZH = {
"ch09-00": ("5dc8ba859f0e", r"""
# 第 9 章 · 一场完整的搬家（AI 应用场景）：一个小 GPT，从头训练到底

*搬家队学过的一切，用在一户真实的人家身上。*

> **运行时间：** 在 2 个 CPU 核上约一分钟（三次 100 步的训练，一次在 1 个 rank 上，一次先在 2 个 rank 上、再换 3 个 rank 续训，
> 还有一次普通的单进程 fp32 训练；每个 rank 一个线程）。不下载任何东西。

到目前为止，搬家队一直拿箱子和试验用的家具练手。今天是一场真正的搬家。这户人家是一个小 GPT：它的**家具**（参数，parameters）分给各个工人，
每人只扛自己那一份，轮到要用的时候再把其余的借过来（ZeRO stage 3）；**写满经验、厚厚的小本子**（fp32 主权重和 Adam 的动量、方差），
连同工人们分到的那份家具，都不放在背包里，而是存进**公司仓库**（CPU 卸载，offload）；家具本身是轻便的折叠款，
小本子里则记着精确的账（fp32 主权重）；搬家队先慢慢起步、逐渐加速（学习率**预热**，warmup），临近结束再慢下来。
搬到一半，搬家队收工过夜，把每样东西放在哪儿一一记下（**检查点**，checkpoint）；第二天早上来的是**三个**工人而不是两个，
他们读了笔记，接着往下搬，就像什么都没发生过。最后，整套家当重新归到一处（**合并**，consolidation），我们再请它开口说话（**采样**，sampling）。

| 故事里 | 这次运行中 | 配置 / zerolab 里 |
|---|---|---|
| 这户人家（整套家当） | 一个字符级 GPT，349,056 个参数 | `zerolab.models.GPT` |
| 它从哪里学 | 《爱丽丝梦游仙境》（*Alice's Adventures in Wonderland*，公版书） | `zerolab.models.public_domain_text()` |
| 搬家队 | 先 1 个，再 2 个，再 3 个 rank（gloo，就在这颗 CPU 上） | `zerolab.Crew` |
| 家具分给各个工人 | ZeRO-3：参数、梯度、优化器状态全部分片（sharding） | `"stage": 3` |
| 仓库 | 优化器状态和参数分片放在主机内存里 | `offload_optimizer`、`offload_param` |
| 折叠家具，精确的登记簿 | bf16 模型，fp32 主权重 | `"bf16": {"enabled": true}` |
| 慢慢起步 | 学习率在 15 步内从 0 升到 6e-3，然后到第 100 步降到 0 | `WarmupDecayLR` |
| 当晚的笔记 | 一个检查点，换一个 rank 数续训 | `save_checkpoint` / `load_checkpoint`（zerolab 会重新分片；DeepSpeed 需要 Universal Checkpointing） |
| 重新归为一户 | 一个 fp32 的 state dict，用模型自己的参数名 | `zerolab.consolidate` |
"""),
"ch09-02": ("50ffa258f03e", r"""
## 1. 计划：一份 DeepSpeed 配置

整场运行由一个 DeepSpeed JSON 文件描述：`configs/zero3_bf16_offload_gpt.json`，DeepSpeed 本身也能直接使用这个文件。
`zerolab.load_config(...).describe()` 按给定的 rank 数，像引擎那样把它读一遍。

**先预测，再运行。** 这份配置把 `train_batch_size` 定为每步 24 条序列，`gradient_accumulation_steps` 定为 1，没有给出微批次。
在 1、2、3 个 rank 上，每个 rank 会分到多大的微批次？5 个 rank 呢？
"""),
"ch09-05": ("2c2fe13d6e64", r"""
有三处选择值得说一说：

- **`train_batch_size` 固定，微批次不给。** 不管多少个 rank，每步都是 24 条序列；微批次由 DeepSpeed（zerolab 也一样）推导出来：24 / (1 × N)。
  正因如此，一次运行才能换一个 rank 数续训，而且训练的仍是同一个问题：每步还是书里同样的 24 个窗口，只是切成 2 份或 3 份。
  这也意味着 rank 数必须能整除 24：在 5 个 rank 上这份配置会被拒绝（DeepSpeed 在 `deepspeed/runtime/config.py` 里的 `_batch_assertion`
  也会拒绝它），因为 4 × 5 = 20 条序列不是配置要求的那个 batch。
- **`stage3_param_persistence_threshold: 0`。** DeepSpeed 的默认值是 10⁵ 个元素：比它小的张量在每个 rank 上都完整保留
  （收集小张量在调用次数上的花费，比它省下的显存还多）。这个小 GPT 的每个张量都比它小，所以按默认值什么都不会分片；换成真实的模型，它几乎会把一切都分片。
- **预热从 0 开始。** DeepSpeed 的 `WarmupDecayLR` 让前两步的学习率恰好为 0（它的公式在第 -1 次和第 0 次迭代时的值），然后沿直线上升
  （`warmup_type: linear`；默认是 `log`），在第 16 步到达 6·10⁻³，再线性下降，到第 100 步降为 0。

## 2. 搬家：1 个 rank，以及先 2 个 rank、再换 3 个 rank 续训

**先预测，再运行。** 同一份配置，用三种方式训练：

1. 在 **1 个 rank** 上训练 100 步（单进程运行）；
2. 在 **2 个 rank** 上训练 50 步并保存检查点（checkpoint），然后由 **3 个 rank** 加载这个检查点，训练后 50 步；
3. 不用 zerolab 的普通 PyTorch 循环，全程 **fp32**（AdamW、同一个调度器类、同样的梯度裁剪），作为参照。

运行 1 和运行 2 每步在同样的 24 个窗口上做同样的运算，但用的是 bf16：每次矩阵乘法都舍入到 8 个有效二进制位，
而且各 rank 的微批次形状不同（24、12、8 行）。它们的损失曲线会完全相同、非常接近，还是相差很远？运行 3 呢？把你的猜测写下来。
"""),
"ch09-11": ("3dd587af193c", r"""
**为什么要有容差，为什么是 0.15。** ZeRO 本身不改变任何运算：在 fp32 下，第 3 章已经表明每个 stage 都与单进程一致，差别只在浮点舍入以内（1e-5）。
这里模型用 **bf16** 计算，只有 8 个有效二进制位，而且各 rank 相乘的矩阵形状不同（24、12 或 8 行），CPU 对它们的分块方式也不同：
舍入各不相同，权重之间逐渐差出 bf16 末位上的几个单位，损失也就差出零点零几奈特（nat）。构建本章时，100 步里的最大差值不到 0.05；
判定留了它三倍的余量。如果检查点丢了什么（Adam 的动量和方差、调度器的步数、某个分片），第 50 步就会出现一次跳变：这里没有，
而且续训后的学习率与不间断运行的完全相同。

**换一个 rank 数续训，是 zerolab 自己的功能。** 3 个 rank 读的是 2 个 rank 写下的分片：zerolab 的 `load_checkpoint` 会按新的总 rank 数（或新的 stage）
把它们重新切分。DeepSpeed 的 ZeRO-3 检查点加载起来是死板的：每个 rank 一个文件（`zero_pp_rank_R_mp_rank_00_optim_states.pt`），
只能在写下它的那个 rank 数上加载。要让 DeepSpeed 的运行换一个 GPU 数续训，得先把检查点转换成**通用检查点**（Universal Checkpoint）：
`python deepspeed/checkpoint/ds_to_universal.py --input_folder ckpt/global_step50 --output_folder ckpt/global_step50_universal`
（它会写出 `ckpt/latest_universal`），然后在配置里加上 `"checkpoint": {"load_universal": true}` 再续训。

三条曲线，连 fp32 参照在内，都在预热快结束、学习率接近峰值时跳了一下：这正是预热要缓和的那种学习率尖峰（这个峰值 6·10⁻³ 对这个模型来说偏高；
在配置的副本里把它调低，跳变就会变小）。这是优化本身的事，与 ZeRO 无关：不用 zerolab 的普通 fp32 循环也一样会跳。fp32 曲线与 bf16 曲线分开的地方，
原因在精度：整个前向（LayerNorm、注意力、残差相加）都在 bf16 下运行，和 DeepSpeed 的 bf16 模式一样；带 fp32 主权重的普通 PyTorch bf16 循环，
表现会和 zerolab 的 bf16 运行一样（试试看，见思考题 2）。

## 3. 谁扛了什么：仓库

每个 rank 的 `engine.memory()` 统计它的计算设备上有什么（这里由 CPU 扮演 GPU），`engine.memory("host")` 统计卸载放进仓库的东西。

**先预测，再运行。** Ψ = 349,056，两种卸载都放到 CPU。步与步之间，一个 rank 会在设备上保留多少字节的模型状态？
在 1、2、3 个 rank 上，所有 rank 加起来会在主机内存里持有多少字节（像第 5 章那样按每个参数的字节数来算）？总量会随 rank 数增长吗？
"""),
"ch09-13": ("6ed7f1e24847", r"""
每个 rank 持有每参数 18 字节中的 1/N，而且全部在主机内存里：bf16 参数（每个 2 字节）、fp32 梯度分片（4）、fp32 主权重加 Adam 的两个矩（12）。
如果你猜的是 16，那就漏掉了主机端更新所用的那份 fp32 梯度副本（第 5 章）。步与步之间，设备上的模型状态为 0 字节；总量也不随 rank 数增长，只多出几个字节。
超出 18Ψ 的那几个字节是 Adam 的步数计数器：每个 rank 上，每个参数组一个 4 字节的数（stage 3 给每个模块建一个组，这里是 21 个）；
不需要补齐，因为每个模块的大小都能被 1、2、3 整除。在一步之中，一个模块的参数只在它的前向和反向时被收集到设备上，用完即释放。

## 4. 重新归为一户：合并

检查点是一个装满分片的文件夹（`rank_0.pt` ……，写下它的每个 rank 一个），按 3 个 rank 排布。`zerolab.consolidate`（或者在 shell 里用
`zerolab consolidate CKPT OUT.safetensors`，相当于 DeepSpeed 的 `zero_to_fp32.py`）从分片重建出每个参数完整的 fp32 值，
写出一个以模型自己的参数名为键的 state dict，普通的 `GPT` 可以用 `strict=True` 加载它。

**先预测，再运行。** 这次运行是在 3 个 rank 上用 bf16 训练的。合并出来的参数是 bf16 还是 fp32？与引擎自己的完整参数逐位相等，还是只在舍入误差内相等？
Ψ = 349,056（输出头与嵌入层共享权重）时，一共有多少个数？
"""),
"ch09-15": ("3b24fb3eead0", r"""
## 5. 让它开口

采样：每一步都根据最后 64 个字符，从模型给出的分布里抽出下一个字符，分布稍微锐化一点（温度 0.8），用的是设了种子的生成器。
（贪心解码，即总是取最可能的那个字符，在这么稚嫩的模型上会陷入自我重复：试试 `temperature=0`。）它写出的文字取决于训练出的权重，
而权重带着这颗 CPU 的浮点噪声，所以下面的字符在你的机器上可能不一样（测试不比较这个单元格的输出）；它下面的判定在哪里都成立。

**先预测，再运行。** 训练了 100 步，大约把书过了一遍，损失低于每字符 2.9 奈特（均匀乱猜是 4.3）：在“Alice was beginning”之后，模型会写出什么？
随机字符、像模像样的英文胡话，还是句子？
"""),
"ch09-18": ("dbd453c08ffc", r"""
像模像样的英文胡话：长度合理的词，用空格隔开，夹着几个真词（“the”、“and”、“she”），标点也落在它常出现的地方。损失刚好低于 2.9 奈特，
意味着模型每一步仍在大约 e^2.9 ≈ 18 个字符之间犹豫：它学会了字母的频率和常见的字母组合，还没学会单词。多训练一会儿（思考题 3），它很快就会变好。
"""),
"ch09-19": ("2871d3e2000f", r"""
## 6. ZeRO 在实践中的应用

我们在这里跑的分片，放大到公开的训练任务中是这样用的（每条都出自它自己的论文或模型卡；来源没说的，我们也不说）：

| 训练任务 | 用了什么 | 来源 |
|---|---|---|
| Turing-NLG，17B（Microsoft，2020） | ZeRO（它的第一个 stage，即优化器状态分片）配合 Megatron-LM 张量并行（TP） | Rajbhandari 等人的论文（*ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*，SC 2020） |
| GPT-NeoX-20B（EleutherAI，2022） | DeepSpeed ZeRO stage 1，配合 Megatron 的张量并行和流水线并行（PP） | Black 等人的论文（*GPT-NeoX-20B: An Open-Source Autoregressive Language Model*，2022） |
| BLOOM，176B（BigScience，2022） | Megatron-DeepSpeed：ZeRO stage 1（优化器状态分片）配合张量并行和流水线并行，bf16，384 张 A100 80 GB GPU | BigScience 的论文（*BLOOM: A 176B-Parameter Open-Access Multilingual Language Model*，2022） |
| OPT-175B（Meta，2022） | PyTorch 的全分片数据并行（Fully Sharded Data Parallel，FSDP）配合 Megatron-LM 张量并行，992 张 A100 80 GB GPU | Zhang 等人的论文（*OPT: Open Pre-trained Transformer Language Models*，2022） |
| Llama 3，405B（Meta，2024） | FSDP 作为 4D 并行（张量、流水线、上下文、数据）中的数据并行那一维 | Llama 团队的论文（*The Llama 3 Herd of Models*，2024） |

怎么读这张表：

- **Stage 1 是最大规模 3D 并行训练的主力。** 张量并行和流水线并行已经把参数和梯度切开了，这时再在数据并行的各个副本之间切分那本厚厚的小本子，
  能用最少的通信量省下最多的显存；要是在流水线之上再用 stage 3，每个微批次都得把参数收集一遍。
- **FSDP 就是 ZeRO-3 的思路在 PyTorch 里的实现**（Zhao 等人的论文 *PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel*，VLDB 2023）：
  `FULL_SHARD` 像 stage 3 那样切分参数、梯度和优化器状态，`SHARD_GRAD_OP` 像 stage 2 那样切分梯度和优化器状态，`NO_SHARD` 就是 DDP。
- **卸载是为小集群准备的，不是为大集群。** ZeRO-Offload（Ren 等人，USENIX ATC 2021）把优化器放在主机内存里，在单张 V100 上训练了一个 130 亿参数的模型；
  ZeRO-Infinity（Rajbhandari 等人，SC 2021）又加上了 NVMe。动用成千上万张 GPU 的大规模预训练有足够的显存，也就不必承受 PCIe 传输；
  在几张 GPU 上微调一个大模型，才是仓库真正划算的地方。

## 本章测得的
"""),
"ch09-21": ("87158062a17c", r"""
- 一份 DeepSpeed 配置就是整个计划：stage、卸载、精度、优化器、调度、batch。固定 `train_batch_size`，让微批次随 rank 数变化。
- 同一份配置在 1 个 rank 上和在 2 → 3 个 rank 上画出同一条损失曲线（bf16 下，差别在 bf16 的舍入以内）；ZeRO 搬动的是字节，不是结果。
- zerolab 的检查点装着一步所需的一切（主权重、Adam 的动量和方差、调度器的步数、各种计数器），可以换一个 rank 数续训（zerolab 在加载时重新分片；
  DeepSpeed 为此需要 `ds_to_universal.py` 和 `load_universal`）；合并再把它变回一个普通的 state dict。
- 在实践中：最大规模的预训练在 3D 并行里用 stage 1；只靠数据并行就必须装下模型的地方用 FSDP（ZeRO-3）；GPU 不多的时候用卸载。

## 思考题

1. 改成在 **1** 个 rank 上续训，而不是 3 个（第三个 `Crew`）。先预测曲线。然后换一个 stage 续训：复制一份配置，设 `"stage": 2`，去掉
   `offload_param`；zerolab 的 `load_checkpoint` 还能用吗？（DeepSpeed 的不做通用检查点转换就不行。）
2. 写出 `reference()` 的 bf16 版本：前向和反向用一份 `model.bfloat16()` 副本，优化器里保留 fp32 主权重（把梯度用 `.float()` 拷过去，
   每步之后再把权重拷回来）。它会落在 fp32 曲线上，还是落在 zerolab 的 bf16 曲线上？
3. 训练 400 步（改 `STEPS`、`HALF`，以及配置副本里的 `total_num_steps`）。采样出来的文字有什么变化？要花多长时间，时间都花在哪儿（`three[0]["traffic"]`）？
4. 把 `stage3_param_persistence_threshold` 改回 DeepSpeed 的默认值（10⁵）：`engine.memory("host")` 现在显示什么，为什么？

**轮到你了：** 在 [`exercises/zh/09_capstone_config.ipynb`](../../exercises/zh/09_capstone_config.ipynb) 里，你亲手为任意 rank 数写出这次运行的
DeepSpeed 配置，检查程序会用它在 2 个和 3 个 rank 上训练这个 GPT。
"""),
"ex09-00": ("1f1632d03354", r"""
# 练习 9 · 用一份配置写下整场搬家

*写下搬家队要照着走的计划：谁扛什么，小本子在哪儿等着，起步多快。*

在第 9 章里，一份 DeepSpeed 配置描述了整场运行。这里由**你来写**它，写成 rank 数的函数，依据是下面这份要求：

- **batch：** 不管多少个 rank，每次优化器更新都是 24 条序列，每个 rank 在 **2** 个微批次上累积；三个键
  （`train_batch_size`、`train_micro_batch_size_per_gpu`、`gradient_accumulation_steps`）都要给出，并且彼此一致；
- **ZeRO：** stage 3；优化器状态**和**参数分片都卸载到 CPU；每个参数都要分片，不管多小（`stage3_param_persistence_threshold`）；
- **精度：** bf16（附带 fp32 主权重，这由 zerolab 和 DeepSpeed 自己保留）；
- **优化器：** AdamW，学习率 6e-3，betas (0.9, 0.95)，权重衰减 0.01；梯度按全局范数 1.0 裁剪；
- **调度：** DeepSpeed 的 `WarmupDecayLR`，从 0 开始，沿直线在 15 步内升到 6e-3，然后到第 100 步降到 0。

DeepSpeed 的键以它的文档（配置 JSON 那一页）为准；`configs/` 里有例子。

**检查不通过时**，它会用几行话说明哪个键错了、期望的是什么，再给一条提示。想同时看到完整的回溯，运行
`import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，再运行一次检查单元格。
"""),
"ex09-03": ("97fa89f7b645", r"""
像引擎那样，在 3 个 rank 上看一看它。先**预测**微批次的大小。
"""),
"ex09-05": ("7f10ff1d0ddc", r"""
**检查。** 先只看你的配置本身，在 1、2、3、4、6 个 rank 上：它必须能按 DeepSpeed 的规则加载（batch 三元组必须一致），做到要求里的每一项选择，
并在 100 步中的每一步给出要求的学习率。然后在 2 个和 3 个 rank 上，分别用你的配置和 zerolab 的配置，把第 9 章的 GPT 在这本书上训练几步；
引擎必须把参数分片和优化器状态放在主机内存里，两边的损失和学习率必须逐步相同。
"""),
"ex09-07": ("db89f7359425", r"""
## 更进一步

1. 为什么 `train_batch_size` 必须在任何 rank 数上都保持 24，检查点才能换一个 rank 数续训？如果把一次 2 个 rank 的运行放到 3 个 rank 上续训，
   而微批次固定为 6，DeepSpeed 会怎么说？
2. 累积步数为 2 时，这份配置在哪些总 rank 数上跑不了？（试试 5。）
3. 把 `offload_optimizer` 里的 `"cpu"` 换成 `"nvme"`（它还需要一个 `nvme_path`）：`zerolab.load_config(...).describe()` 说有哪些变化？
"""),
}
