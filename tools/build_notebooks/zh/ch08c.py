"""练习 8c「借来、归还、再借」的中文（tools/build_notebooks/ch08c.py 的 markdown 单元格）。

每项：单元格 id -> (所译英文原文的 sha1 前 12 位, 中文)。英文改动后哈希对不上，
tests/test_zh_edition.py 会点名该单元格；改好中文后运行
``python tools/build_notebooks/zh_edition.py --accept ch08c:<单元格 id>``。
"""

ZH = {
"ex08c-00": ("0a45a5913512", r"""
# 练习 8c · 借来、归还、再借：把 stage 3 的收集写成模块钩子

到了 stage 3，没有哪个工人拥有一件完整的家具：每人只保管每件家具的 1/N 一片（**参数**，parameters）。
搬家队要进一个房间干活之前（一个模块的**前向**，forward），先从所有人那里把这个房间的家具借来拼好（一次 **all-gather**）；
离开房间时再还回去（**释放**，release：只留下自己那一片）。回程穿过整栋房子时（**反向**，backward），每个房间的活要倒着做一遍，
为此家具必须在搬家队走到这个房间**之前再拼一次**。

第 8 章调的是提前借*多少*。这里你来写*什么时候*借：zerolab 的 stage 3 装在每个模块上的那些钩子（hooks）。
这是 DeepSpeed 的设计（`deepspeed/runtime/zero/parameter_offload.py` 里的 `DeepSpeedZeRoOffload`：前向前置钩子取来模块的参数，
前向钩子释放它们，并把输出包一层，让流到输出的第一个梯度再把参数取回来，输入上的钩子在模块反向之后释放它们；
`ZeROOrderedDict` 负责抓住在自己模块之外被读到的参数）。
zerolab 的对应实现是 `zerolab/zero/stage3/hooks.py`（`ModuleHooks`）；检查程序会把**你的**类换进去，在真实的引擎里运行，
并把每一次收集和释放与 zerolab 自己的逐一对照。

**检查不通过时**，它会用几行话说明哪里错了，并点出可能的错误；想看完整的回溯，运行
`import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`，再运行一次检查单元格。
"""),
"ex08c-01": ("5cde10ff5e34", r"""
## 引擎给你什么，你来决定什么

`params` 是引擎的 `GatheredParams`（`zerolab/zero/stage3/gather.py`）。一个**组**（group）就是一个参数的分区，和 DeepSpeed 的分法一样
（即它的 `ds_tensor`：`params.groups[i]`，参数名在 `.label` 里）。你可以调用：

| 调用 | 作用 |
|---|---|
| `params.module_groups.get(module, [])` | `module` 拥有的组的下标（只算它自己的，不算子模块的） |
| `params.unshard_unit(ids, module)` | 为 `module` 取参数（轨迹里的一个事件）：把 `ids` 里还没收集的组放在**一次** all-gather 里收集（一个模块的单元） |
| `params.top_up(module)` | 为一个自己没有参数的模块取参数：仍是轨迹里的一个事件（DeepSpeed 对每个模块都运行 `fetch_sub_module`） |
| `params.unshard(group)` | 同上，只收集一个组 |
| `params.after_forward(group)` | 用到它的某个模块前向结束了：释放它（除非复用距离让它留着） |
| `params.after_backward(ids)` | 某个模块的反向结束了：释放这些组（除非复用距离让它们留着） |
| `params.start_forward_pass()` / `params.end_forward_pass()` | 最外层模块的前向开始 / 返回 |
| `params.begin_backward()` | 第一个梯度到达了某个模块的输出：反向开始了 |
| `params.in_backward`、`params.full` | 是否在反向中；当前已收集的组的下标 |

作为管道代码直接给你的：`watch_params(hooks, params)` 让每个模块的参数字典在某个参数按属性被读到时（`module.weight`）
调用 `hooks.on_param_read(p, name)`；`on_first_output_grad(output, fn)` 在第一个梯度到达 `output` 里任意一个张量时
运行一次 `fn()`，也就是刚好在这个模块的反向之前；`on_inputs_grad(inputs, fn)` 在一个模块所有输入的梯度都算出来后运行一次
`fn()`，也就是刚好在它的反向之后。某个组的梯度归约完之后，引擎会自己释放它；反向结束时会释放全部。
同样直接给你的还有 `fetch_ids(module)`：此刻为 `module` 取参数会收集哪些组。引擎把一步里各模块的取参数记录成一条**轨迹**（trace，
即 DeepSpeed 的 `PartitionedParameterCoordinator`），从下一步起，它的释放规则 `stage3_max_reuse_distance` 就读这条轨迹：
轨迹表明很快还要用的组，它会留着。所以每个模块的每次取参数，前向和反向、有参数的和没参数的，都必须是一个事件（把 `module` 传进去）。

你要写三个方法。有两种情况需要想清楚：

- **共享（绑定）的权重**（tied weight）：模型的输出层用的是 embedding 的权重。两个模块都列出了这个组；前向和反向里都一样，
  它为每个模块各收集一次、各释放一次，而且在已经收集好的时候不会再收集第二次；
- **在自己模块之外被读到的权重**：`nn.MultiheadAttention` 直接拿 `self.out_proj.weight` 来算，并不调用 `out_proj`；
  模型也可能在自己的前向里算 `F.linear(h, self.mix.weight)`。读到时收集它，并把它永久绑到读它的那个模块上（`self.registered`）：
  从此它就属于那个模块的单元，在那个模块的前向之前和反向之前都和模块自己的组一起、在一次 all-gather 里收集，每次之后都释放。
"""),
"ex08c-04": ("92843595083c", r"""
## 在 2 个 rank 上跑两步

检查用的模型（`hooks3.HooksNet`，2,928 个参数）由一个 embedding、一个多头注意力、一个 MLP、一个只有根模块的前向才用的权重 `mix`，
以及一个与 embedding 绑定的输出层组成。引擎以 fp32 运行 stage 3，每个参数都参与收集（`stage3_param_persistence_threshold` 为 0），
前向转反向的拐点上什么都不留（`stage3_max_reuse_distance` 为 0），也不预取，这样每一次收集都正是你的钩子要求的那一次。
`two_steps(MyHooks)` 用你的类充当引擎的钩子训练两步（`zerolab.zero.stage3.hooks.use_module_hooks`，zerolab 自己的接入点），
并记下每一次收集（+）和释放（−）。

**先预测，再运行。** 这个模型有 10 个组，每个参数一个（`embed.weight`，注意力的 `in_proj_weight`、`in_proj_bias`、
`out_proj.weight`、`out_proj.bias`，MLP 的两个权重和两个偏置，`mix.weight`；输出层没有自己的参数）。
第一步的前向和反向一共做多少次参数 all-gather？等在模块外被读到的权重都绑好之后，第二步又是多少次？哪个组收集得最频繁？
先把你的猜测写下来。
"""),
"ex08c-06": ("2d0ae96b15bf", r"""
十四次，然后是十二次。第一步里，`attn.out_proj.weight`、`attn.out_proj.bias` 和 `mix.weight` 在被读到的地方收集，每个一次调用，
也就是在 `attn` 和根模块的前向里，并且被绑到这两个模块上：前向 8 次调用，反向 6 次。从此它们各自属于所在模块的单元。
第二步里，根模块的前向一开始就收集 `mix.weight`，注意力的四个参数在同一次 all-gather 里到来（中间没有释放）：前向 6 次调用，反向 6 次。
一个模块的权重和偏置总在同一次调用里传输。embedding 的权重每步收集四次：
前向和反向里各为 `embed` 和绑定的 `head` 收集一次，每个模块用完就释放（复用距离为 0）。反向里最外层的模块先来：根模块先收集 `mix`，
head 再收集 embedding，因为根模块的输出*就是* head 的输出，外层的钩子先运行。

这就是 DeepSpeed 0.19.8 的调用方式，一次不差。在 2 个 CPU rank 上对这个模型实测，它第一步做 8 + 6 次参数 all-gather，
之后每步 6 + 6 次，大小相同、顺序相同：它分区的单位是单个参数，所以先读 `out_proj.weight`、再读 `out_proj.bias` 会把它们逐个收集。
"""),
"ex08c-07": ("360d83e4d0d7", r"""
## 释放能省下什么

**先预测，再运行。** 下面的 `Hoarder`（囤积者）和你的类一样收集，但自己从不释放任何组（引擎仍会在某个组的梯度归约完之后释放它）。
同时收集着的元素个数的峰值（`engine.stage3_stats().peak_gathered_numel`），用你的钩子是多少，用囤积者的又是多少？按模块算：
`embed` 512、注意力的输入投影 816（768 + 48）、它的 `out_proj` 272（256 + 16）、`mlp.0` 544、`mlp.2` 528、`mix` 256 个元素。把两个数都写下来，再说说你的峰值出现在什么时候。
"""),
"ex08c-09": ("822b90f04269", r"""
囤积者一直攥着整个模型（这就是 stage 2 在参数上的显存），省下了反向里的收集和绑定权重的第二次收集：每步 5 次调用而不是 12 次。
你的峰值是注意力的单元，而根模块这时还攥着 `mix`：根模块的前向最先收集了它，要到根模块自己的前向结束才放手。在真实模型上，
收集的峰值大约是最大的单元再加上外层模块攥着的部分；所以 DeepSpeed 的 `stage3_max_reuse_distance` 和预取预算（第 8 章）
都是在它之上的上限。
"""),
"ex08c-10": ("f47361319c56", r"""
## 通信上的代价

**先预测，再运行。** Ψ = 2,928 个 fp32 参数（在 2 个 rank 上没有补齐），你的 all-gather 在第二步里一共拼出多少字节的参数
（算上绑定权重多出来的几次收集）？按第 2 章的环形约定（每次 all-gather 输出的 (N−1)/N），每个 rank 发出多少字节？
"""),
"ex08c-12": ("07c298b1f213", r"""
每步 2Ψ 的参数，前向和反向再各加一次绑定的权重：这是 stage 3 只保管一片的代价（第 3 章 3Ψ 里的第三个 Ψ
来自梯度的 reduce-scatter）。如果复用距离覆盖整个模型，embedding 就会从 head 用完一直留到它自己再用，省下这两次多出来的收集。

## 检查

它在 2 个和 3 个 rank 上把你的类运行 3 步，旁边是同一个引擎上 zerolab 自己的 `ModuleHooks`；然后在 2 个 rank 上再跑一次，这次
`stage3_max_reuse_distance` 为 1,200（前向最后几个模块留到反向），并且 MLP 做了激活检查点（`torch.utils.checkpoint`，
`use_reentrant=False`，即它的前向会在反向里再跑一遍）。它依次比较某个 rank 上的失败
（哪个阶段抛了异常）、同时收集着的元素峰值（从不释放的类会在这里失败，报“never released: peak X vs Y”）、按顺序的每一次收集和释放、
账本里的参数 all-gather（调用次数和字节数），最后是损失和参数是否逐位相同。哪里不一样，它就点出可能的错误：只收集不释放、
反向之前就释放了却再也不收集回来、再收集时用了别的模块的组、忘了在模块外被读到的权重或忘了把它永久绑定、把一个单元的组逐个收集、
模块反向之后不释放、释放了复用距离要留的组（用 `params.reshard` 代替 `params.after_forward`，或者轨迹里缺了某些模块的取参数）、
在反向的重算之后释放。
"""),
"ex08c-14": ("22875fdfab64", r"""
## 本章测得的

- 在 2 个 rank 上跑两步：14 次参数 all-gather；外部权重绑到读它们的模块上之后是 12 次（前向 6 次、反向 6 次，
  与 DeepSpeed 的调用一一对应、大小相同）；每个组在用到它的每个模块的前向和反向之后都释放。
- 复用距离 1,200、MLP 做了激活检查点：3 步 34 次 all-gather，而不是 38 次（根模块的 `mix.weight` 和绑定的 embedding 跨过拐点留着）；
  MLP 在反向里的重算什么也不收集、什么也不释放。
- 同时收集着的元素峰值：有你的释放是 1,344，不释放是 2,928（整个模型）。
- 每步拼出 27,520 字节：2Ψ 的参数，再加两次绑定的权重。

## 它在源码里的位置

在 DeepSpeed 0.19.8 里，`DeepSpeedZeRoOffload._register_deepspeed_module`（`runtime/zero/parameter_offload.py`）给每个模块注册：
一个前向前置钩子（`pre_sub_module_forward_function`，即协调器的 `fetch_sub_module`，它也负责预取）、一个前向钩子
（`post_sub_module_forward_function`，即 `release_sub_module`，在复用距离之内还会用到的参数它会留着）、一个把输出包起来的前向钩子，
让流到输出的第一个梯度为该模块的反向运行 `fetch_sub_module`（`_pre_backward_module_hook`），以及一个把输入包起来的前置钩子，
输入的梯度全部到齐后，`post_sub_module_backward_function` 在模块反向之后释放参数。
`ZeROOrderedDict.__getitem__` 替换每个模块的 `_parameters`，用来抓住在自己模块之外被读到的参数，并把它永久绑到正在运行的模块上
（`register_external_parameter`，`runtime/zero/partition_parameters.py`；模型也可以手动调用它）。
你的类和 zerolab 的 `ModuleHooks` 一样，让每个模块的取参数都成为协调器轨迹里的一个事件，没有参数的模块也不例外
（`top_up`，DeepSpeed 在这里还会补一次预取）；zerolab 的类还会拒绝在损失里读参数（`ExternalParameterError`），这里你的类不需要。

## 思考题

1. 如果 `stage3_max_reuse_distance` 用 DeepSpeed 的默认值 10⁹，上面这一步里哪些收集会消失？为什么调用 `params.after_forward`
   （而不是直接释放）能让你的类在这个设置下也是对的？
2. 你的 `on_param_read` 把外部权重绑到最内层正在运行的模块上（`self.frames[-1]`）。如果绑到最外层的模块上，
   在一个 48 层、注意力会读 `out_proj.weight` 的 transformer 上，要多花多少显存？
3. 开了激活检查点之后，一个模块的前向会在反向里再跑一遍。这时你的哪些钩子必须让参数保持收集状态？
   `params.in_backward` 怎么告诉你？
4. 为什么每个 rank 都必须按同样的顺序收集同样的组？如果有一个 rank 跳过了绑定权重的第二次收集，会发生什么？

检查程序让它的 rank 一直运行着，好让第二次尝试快一些。做完之后把它们停掉：
"""),
}
