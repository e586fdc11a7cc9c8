"""练习 8c「借来、归还、再借」的中文（tools/build_notebooks/ch08c.py 的 markdown 单元）。

每项：单元 id -> (所译英文原文的 sha1 前 12 位, 中文)。英文改动后哈希对不上，
tests/test_zh_edition.py 会点名该单元；改好中文后运行
``python tools/build_notebooks/zh_edition.py --accept ch08c:<单元 id>``。
"""

ZH = {
"ex08c-00": ("7cacb77b870b", r"""
# 练习 8c · 借来、归还、再借：把 stage 3 的收集写成模块钩子

到了 stage 3，没有哪个工人拥有一件完整的家具：每人只保管每件家具的 1/N 一片（**参数**，parameters）。
搬家队要进一个房间干活之前（一个模块的**前向**，forward），先从所有人那里把这个房间的家具借来拼好（一次 **all-gather**）；
离开房间时再还回去（**释放**，release：只留下自己那一片）。回程穿过整栋房子时（**反向**，backward），每个房间的活要倒着做一遍，
为此家具必须在搬家队走到这个房间**之前再拼一次**。

第 8 章调的是提前借*多少*。这里你来写*什么时候*借：zerolab 的 stage 3 装在每个模块上的那些钩子（hooks）。
这是 DeepSpeed 的设计（`deepspeed/runtime/zero/parameter_offload.py` 里的 `DeepSpeedZeRoOffload`：前向前置钩子取来模块的参数，
前向钩子释放它们，并把输出包一层，让流到输出的第一个梯度再把参数取回来；`ZeROOrderedDict` 负责抓住在自己模块之外被读到的参数）。
zerolab 的对应实现是 `zerolab/hooks.py`（`ModuleHooks`）；检查程序会把**你的**类换进去，在真实的引擎里运行，
并把每一次收集和释放与 zerolab 自己的逐一对照。

**检查不通过时**，它会用几行话说明哪里错了，并点出可能的错误；想看完整的回溯（traceback），运行
`import zerolab.checks; zerolab.checks.full_tracebacks()`，再运行一次检查单元。
"""),
"ex08c-01": ("8ed4dff28661", r"""
## 引擎给你什么，你来决定什么

`params` 是引擎的 `GatheredParams`（`zerolab/gather.py`）。一个**组**（group）就是一个模块自己的参数，展平成一块
（`params.groups[i]`，名字在 `.label` 里）。你可以调用：

| 调用 | 作用 |
|---|---|
| `params.module_groups.get(module, [])` | `module` 拥有的组的下标（只算它自己的，不算子模块的） |
| `params.unshard(group)` | 收集它，除非它已经收集好了（只有这时才做 all-gather） |
| `params.after_forward(group)` | 用到它的某个模块前向结束了：释放它（除非复用距离让它留着） |
| `params.start_forward_pass()` / `params.end_forward_pass()` | 最外层模块的前向开始 / 返回 |
| `params.begin_backward()` | 第一个梯度到达了某个模块的输出：反向开始了 |
| `params.in_backward`、`params.full` | 是否在反向中；当前已收集的组的下标 |

作为管道代码直接给你的：`watch_params(hooks, params)` 让每个模块的参数字典在某个参数按属性被读到时（`module.weight`）
调用 `hooks.on_param_read(p, name)`；`on_first_output_grad(output, fn)` 在第一个梯度到达 `output` 里任意一个张量时
运行一次 `fn()`，也就是刚好在这个模块的反向之前。某个组的梯度归约完之后，引擎会自己释放它；反向结束时会释放全部。

你要写三个方法。有两种情况需要想清楚：

- **共享（绑定）的权重**（tied weight）：模型的输出层用的是 embedding 的权重。两个模块都列出了这个组；它必须为每个模块各收集一次、
  各释放一次，而且在已经收集好的时候不能再收集第二次；
- **在自己模块之外被读到的权重**：`nn.MultiheadAttention` 直接拿 `self.out_proj.weight` 来算，并不调用 `out_proj`；
  模型也可能在自己的前向里算 `F.linear(h, self.mix.weight)`。把这样的权重绑到读它的那个模块上：那个模块的前向结束后释放，
  在那个模块的反向之前再收集。
"""),
"ex08c-04": ("b9383bd135a4", r"""
## 在 2 个 rank 上跑一步

检查用的模型（`hooks3.HooksNet`，2,928 个参数）由一个 embedding、一个多头注意力、一个 MLP、一个只有根模块的前向才用的权重 `mix`，
以及一个与 embedding 绑定的输出层组成。引擎以 fp32 运行 stage 3，每个参数都参与收集（`stage3_param_persistence_threshold` 为 0），
前向转反向的拐点上什么都不留（`stage3_max_reuse_distance` 为 0），也不预取，这样每一次收集都正是你的钩子要求的那一次。
`one_step(MyHooks)` 用你的类充当引擎的钩子训练一步（`zerolab.hooks.use_module_hooks`，zerolab 自己的接入点），
并记下每一次收集（+）和释放（−）。

**先预测，再运行。** 这个模型有 6 个组（`embed`、`attn`、`attn.out_proj`、`mlp.0`、`mlp.2`、`mix`；输出层没有自己的参数）。
一步里前向和反向一共做多少次参数 all-gather？哪个组比其他组收集得更频繁？先把你的猜测写下来。
"""),
"ex08c-06": ("d80e520333cf", r"""
十三次：前向 6 + 1 次，反向 6 次。embedding 的组在前向里被收集两次，一次为 `embed`，一次为绑定的 `head`
（中间被释放了：复用距离为 0），反向里再收集一次：从 head 的反向一直到 embedding 的反向它都保持收集状态，直到它的梯度
（两处用法之和）归约完毕。`attn.out_proj` 和 `mix` 在读到它们的那个前向里被收集，并在那个前向结束时随 `attn` 和根模块一起释放。
前向里 DeepSpeed 也是这样为每个模块各取一次绑定的权重（`fetch_sub_module`）。反向里的释放时机是 zerolab 引擎的规则
（一个组在梯度归约完之后释放）。DeepSpeed 0.19.8 则在每个模块的反向之后就释放（`post_sub_module_backward_function`）：
在 2 个 CPU rank 上对这个模型实测，它在反向里为 embedding 的反向把绑定的权重又收集了一次。它还把外部权重绑在读它的模块上
（`ds_external_parameters`），从第二步起和那个模块自己的参数在同一次调用里收集：那边每步 6 + 6 次调用，而 zerolab 的钩子是 7 + 6 次。
"""),
"ex08c-07": ("8cb4d5977cfd", r"""
## 释放能省下什么

**先预测，再运行。** 下面的 `Hoarder` 和你的类一样收集，但从不释放（引擎会在反向结束时释放全部）。同时收集着的元素个数的峰值
（`params.peak_gathered_numel`），用你的钩子是多少，用囤积者的又是多少？各组大小：`embed` 512、`attn` 816、`attn.out_proj` 272、
`mlp.0` 544、`mlp.2` 528、`mix` 256 个元素。把两个数都写下来，再说说你的峰值出现在什么时候。
"""),
"ex08c-09": ("327cf1cbf189", r"""
囤积者一直攥着整个模型（这就是 stage 2 在参数上的显存），省下了反向里的收集：6 次调用而不是 13 次。你的峰值出现在反向：
embedding 从 head 的反向（第一个）一直收集到它自己的反向（最后一个），途中碰上注意力的两个组。在真实模型上，收集的峰值大约是
最大的一层再加上绑定的 embedding 占着的那部分；所以 DeepSpeed 的 `stage3_max_reuse_distance` 和预取预算（第 8 章）都是在它之上的上限。
"""),
"ex08c-10": ("6b2eada1e59c", r"""
## 线路上的代价

**先预测，再运行。** Ψ = 2,928 个 fp32 参数（在 2 个 rank 上没有补齐），你的 all-gather 一步里一共拼出多少字节的参数
（算上绑定权重的第二次收集）？按第 2 章的环形约定（每次 all-gather 输出的 (N−1)/N），每个 rank 发出多少字节？
"""),
"ex08c-12": ("4c2f1495eaa8", r"""
每步 2Ψ 的参数，再加一次绑定的权重：这是 stage 3 只保管一片的代价（梯度的 reduce-scatter 再加上第 3 章 3Ψ 里的第三个 Ψ）。

## 检查

它在 2 个和 3 个 rank 上把你的类运行 3 步，旁边是同一个引擎上 zerolab 自己的 `ModuleHooks`，依次比较：某个 rank 上的失败
（哪个阶段抛了异常）、同时收集着的元素峰值（从不释放的类会失败："never released: peak X vs Y"）、按顺序的每一次收集和释放、
账本里的参数 all-gather（调用次数和字节数），最后是损失和参数是否逐位相同。哪里不一样，它就点出可能的错误：只收集不释放、
反向之前就释放了却再也不收集回来、再收集时用了别的模块的组、忘了在模块外被读到的权重、把共享的权重收集了两次。
"""),
"ex08c-14": ("1e9ff53efbba", r"""
## 本章测得的

- 在 2 个 rank 上跑一步：13 次参数 all-gather，前向 7 次（绑定的 embedding 两次），反向 6 次，每个都在用到它的前向结束时释放。
- 同时收集着的元素峰值：有你的释放是 1,600，不释放是 2,928（整个模型）。
- 每步拼出 25,472 字节：2Ψ 的参数再加一次绑定的权重。

## 它在哪里

在 DeepSpeed 0.19.8 里，`DeepSpeedZeRoOffload._register_deepspeed_module`（`runtime/zero/parameter_offload.py`）给每个模块注册：
一个前向前置钩子（`pre_sub_module_forward_function`：协调器的 `fetch_sub_module`，它也负责预取）、一个前向钩子
（`post_sub_module_forward_function`：`release_sub_module`，在复用距离之内还会用到的参数它会留着）、一个把输出包起来的前向钩子，
让流到输出的第一个梯度为该模块的反向运行 `fetch_sub_module`（`_pre_backward_module_hook`），以及一个在模块反向之后释放参数的前置钩子。
`ZeROOrderedDict.__getitem__` 替换每个模块的 `_parameters`，用来抓住在自己模块之外被读到的参数；
`deepspeed.zero.register_external_parameter`（`runtime/zero/partition_parameters.py`）则可以手动把一个参数绑到某个模块上。
zerolab 的 `ModuleHooks` 还会在没有参数的模块上补取预取，并拒绝在损失里读参数（`ExternalParameterError`）；
这里你的类两样都不需要（没有预取，也没有这样的读取）。

## 思考题

1. 如果 `stage3_max_reuse_distance` 用 DeepSpeed 的默认值 10⁹，上面这一步里哪些收集会消失？为什么调用 `params.after_forward`
   （而不是直接释放）能让你的类在这个设置下也是对的？
2. 你的 `on_param_read` 把外部权重绑到最内层正在运行的模块上（`self.frames[-1]`）。如果绑到最外层的模块上，
   在一个 48 层、注意力会读 `out_proj.weight` 的 transformer 上，要多花多少显存？
3. 开了激活检查点（activation checkpointing）之后，一个模块的前向会在反向里再跑一遍。这时你的哪些钩子必须让参数保持收集状态？
   `params.in_backward` 怎么告诉你？
4. 为什么每个 rank 都必须按同样的顺序收集同样的组？如果有一个 rank 跳过了绑定权重的第二次收集，会发生什么？

检查程序让它的 rank 一直运行着，好让第二次尝试快一些。做完之后把它们停掉：
"""),
}
