"""Hand-written keyword lists: the tagger's floor when no keyword files exist.

Written for this project from general clinical-coding knowledge (not copied
from any data set), so the embedded demo works without ``shared/data``.
They serve approach A's keyword-attentive ranker (KAR), which needs to know
which characters of a mention / term are the body site (部位) and the
procedure or disease type (术式 / 病种), and which are usually ignorable
(laterality, approach, disease nature).

Every list is a whitespace-separated string so it reads like a word list;
:data:`BUILTIN_KEYWORDS` maps each kind of ``records.KEYWORD_KINDS`` to its
words. Words are written in normalized form (lower case, half-width).
Where lists overlap, the first kind in ``PRIORITY`` wins (a laterality word
such as ``左侧`` is never a site).

Sites that *start* with a laterality character (左心室, 右束支, 左前降支)
are listed as sites so the longest match keeps them whole.
"""

from __future__ import annotations

LATERALITY = """
左 右 双 左侧 右侧 双侧 两侧 单侧 一侧 对侧 同侧 患侧 健侧 左右 左右侧 双边 单边
左边 右边 左上 左下 右上 右下 双眼 左眼 右眼 双耳 左耳 右耳
"""

NATURE = """
恶性 良性 交界性 原位 转移性 转移 继发性 继发 原发性 原发 复发性 复发 多发性 多发 单发
急性 慢性 亚急性 急性发作 慢性急性发作 急性加重 先天性 先天 后天性 后天 获得性 遗传性 家族性
陈旧性 陈旧 新鲜 外伤性 创伤性 损伤性 病理性 医源性 药物性 药源性 酒精性 中毒性 放射性
感染性 非感染性 病毒性 细菌性 真菌性 结核性 化脓性 特发性 原因不明 自身免疫性 免疫性 过敏性
反应性 退行性 退变性 增生性 萎缩性 糜烂性 出血性 缺血性 梗阻性 阻塞性 坏死性 浸润性 侵袭性
弥漫性 局限性 局灶性 节段性 隐匿性 间歇性 持续性 阵发性 复杂性 单纯性 混合性 功能性 器质性
开放性 闭合性 粉碎性 压缩性 重度 中度 轻度 极重度 重型 中型 轻型 早期 中期 晚期 终末期
难治性 顽固性 复发难治 高危 中危 低危 妊娠期 产后 围产期 新生儿 老年性 儿童 青少年 幼年型
"""

APPROACH = """
经腹 经腹腔 经腹部 腹腔镜 腹腔镜下 经腹腔镜 后腹腔镜 后腹腔镜下 胸腔镜 胸腔镜下 经胸腔镜 电视胸腔镜
内镜 内镜下 经内镜 内窥镜 内窥镜下 腔镜 腔镜下 宫腔镜 宫腔镜下 关节镜 关节镜下 膀胱镜 膀胱镜下
输尿管镜 输尿管镜下 输尿管软镜 肾镜 经皮肾镜 胃镜 胃镜下 肠镜 肠镜下 结肠镜 结肠镜下 十二指肠镜
支气管镜 支气管镜下 纤支镜 喉镜 喉镜下 支撑喉镜 支撑喉镜下 鼻内镜 鼻内镜下 胆道镜 椎间孔镜
纵隔镜 脑室镜 神经内镜 显微镜下 显微 经皮 经皮穿刺 经尿道 经阴道 经直肠 经肛门 经肛 经口 经口腔
经鼻 经鼻腔 经蝶 经蝶窦 经胸 经胸腔 经导管 经静脉 经动脉 经股动脉 经桡动脉 经颈静脉 经会阴
经皮经肝 经颅 经后路 经前路 前路 后路 侧路 介入 血管内 开腹 开胸 开颅 微创 小切口 单孔 机器人
达芬奇 超声引导 超声引导下 ct引导 ct引导下 导航 神经导航 体外 直视 直视下
"""

# Disease types (病种 / 形态) and procedure types (术式). A few single
# characters (炎 癌 瘤 病 症 疝 瘘 痛) carry the type of many diagnoses.
TYPE = """
炎 癌 瘤 病 症 疝 瘘 痛 肿瘤 恶性肿瘤 良性肿瘤 继发恶性肿瘤 原位癌 囊肿 骨折 结石 综合征 综合症
损伤 外伤 挫伤 裂伤 撕裂 断裂 扭伤 脱位 半脱位 烧伤 烫伤 冻伤 咬伤 切割伤 异物 出血 血肿 积血
梗死 梗塞 栓塞 血栓 血栓形成 狭窄 闭塞 破裂 穿孔 梗阻 感染 溃疡 坏死 积液 积水 积气 水肿 增生
肥大 萎缩 硬化 纤维化 钙化 息肉 结节 畸形 缺损 缺如 发育不良 功能障碍 功能不全 衰竭 功能衰竭
脓肿 窦道 扩张 动脉瘤 血管瘤 淋巴瘤 白血病 肉瘤 腺瘤 腺癌 鳞癌 鳞状细胞癌 肌瘤 脂肪瘤 纤维瘤
错构瘤 乳头状瘤 乳头状癌 病损 病变 占位 肿物 肿块 包块 中毒 过敏 疼痛 亢进 减退 缺乏 不足 失禁 脱垂 粘连 嵌顿
高血压 糖尿病 结核 梅毒 贫血 休克 昏迷 恶心 呕吐 腹泻 便秘 发热 咳嗽 头晕 心律失常 心衰 心梗 脑梗
妊娠 双胎 分娩 流产 早产 术后 状态 复查 随诊 化疗 放疗 双相情感障碍
手术 切除 部分切除 全切除 次全切除 切除术 部分切除术 全切除术 次全切除术 根治术 根治性切除术
修补术 修补 成形术 成形 置换术 置换 吻合术 吻合 造口术 造瘘术 造口 造瘘 还纳术 闭合术 引流术 引流
穿刺术 穿刺 活检术 活检 活组织检查 探查术 探查 切开术 切开 缝合术 缝合 固定术 内固定术 外固定术
复位术 复位 松解术 松解 减压术 减压 移植术 移植 植入术 植入 置入术 置入 取出术 取出 去除术 去除
拔除术 拔除 结扎术 结扎 栓塞术 消融术 消融 碎石术 碎石 取石术 取石 重建术 重建 矫正术 矫正 扩张术
支架置入术 搭桥术 分流术 清创术 清创 清扫术 清扫 切断术 切断 离断术 截肢术 截肢 融合术 融合
摘除术 摘除 剥除术 剥脱术 刮除术 刮除 冲洗术 冲洗 注射 注射术 置管术 置管 插管术 插管 造影 造影术
检查 治疗 介入治疗 热凝术 射频消融术 电切术 激光 灌注 输注 监测 测定 封堵术 修复术 修复 整复术
"""

SITE = """
头 颈 胸 腹 背 腰 骶 臀 肩 肘 腕 手 指 髋 膝 踝 足 趾 脑 心 肺 肝 胆 脾 胰 胃 肠 肾 眼 耳 鼻 咽 喉 舌 牙
唇 腭 骨 颅 面 乳 脐
头部 颈部 胸部 腹部 背部 腰部 骶部 骶尾部 臀部 面部 颜面 头皮 头颈 胸壁 腹壁 盆腔 会阴 腹股沟 腋窝
上肢 下肢 四肢 大腿 小腿 前臂 上臂 手指 足趾 拇指 拇趾 手掌 足底 足背
脑 大脑 小脑 脑干 脑室 脑膜 硬脑膜 蛛网膜 颅内 颅骨 颅底 额叶 颞叶 顶叶 枕叶 基底节 丘脑 垂体 松果体
脊髓 脊柱 颈椎 胸椎 腰椎 骶椎 骶骨 尾骨 椎间盘 椎管 椎体 椎板 神经 神经根 三叉神经 面神经 坐骨神经
视神经 听神经 迷走神经 交感神经 正中神经 尺神经 桡神经 腓总神经 臂丛
眼 眼睑 眼眶 结膜 角膜 巩膜 虹膜 晶状体 晶体 视网膜 玻璃体 脉络膜 泪囊 泪道 泪腺 眼球
耳 外耳 中耳 内耳 鼓膜 鼓室 乳突 耳廓 鼻 鼻腔 鼻窦 上颌窦 额窦 筛窦 蝶窦 鼻中隔 鼻甲 鼻咽 口咽 喉咽
喉 声带 会厌 扁桃体 腺样体 口腔 舌 牙 牙龈 牙周 唇 腭 颌 上颌 下颌 颌骨 下颌骨 腮腺 颌下腺 唾液腺
甲状腺 甲状旁腺 肾上腺 胸腺 乳腺 乳房 乳头
气管 支气管 肺 肺叶 上叶 中叶 下叶 上肺 下肺 胸膜 胸腔 纵隔 膈 膈肌
心 心脏 心包 心肌 心内膜 心房 心室 左心房 左心室 右心房 右心室 左心 右心 房间隔 室间隔 左束支 右束支
二尖瓣 三尖瓣 主动脉瓣 肺动脉瓣 冠状动脉 冠脉 左主干 左前降支 回旋支 右冠状动脉
血管 动脉 静脉 主动脉 肺动脉 肺静脉 颈动脉 椎动脉 锁骨下动脉 股动脉 腘动脉 髂动脉 肾动脉 大隐静脉
小隐静脉 下腔静脉 上腔静脉 门静脉 颈静脉 淋巴结 淋巴管 脾脏
食管 食道 贲门 胃 胃底 胃体 胃窦 幽门 十二指肠 空肠 回肠 小肠 大肠 结肠 升结肠 横结肠 降结肠
乙状结肠 盲肠 阑尾 直肠 肛门 肛管 肝 肝脏 肝内 肝门 胆囊 胆管 胆总管 肝内胆管 胆道 胰腺 胰头
胰尾 脾 腹膜 腹膜后 腹腔 网膜 肠系膜
肾 肾脏 肾盂 输尿管 膀胱 尿道 前列腺 睾丸 附睾 精索 输精管 阴茎 阴囊 包皮 鞘膜 精囊
子宫 宫颈 子宫颈 子宫内膜 宫腔 卵巢 输卵管 附件 阴道 外阴 盆底 胎盘 羊膜
皮肤 皮下 软组织 肌肉 肌腱 韧带 筋膜 滑膜 关节 骨 骨骼 骨髓 软骨 骨盆 髂骨 股骨 股骨头 胫骨 腓骨
髌骨 肱骨 尺骨 桡骨 锁骨 肩胛骨 肋骨 胸骨 跟骨 距骨 跖骨 掌骨 指骨 趾骨 腕骨 半月板 交叉韧带
前交叉韧带 后交叉韧带 肩袖 跟腱 膝关节 髋关节 肩关节 肘关节 踝关节 腕关节 指间关节 骶髂关节
"""

LISTS = {
    "laterality": LATERALITY,
    "nature": NATURE,
    "approach": APPROACH,
    "type": TYPE,
    "site": SITE,
}

# Earlier kinds win when a word appears in several lists.
PRIORITY = ("laterality", "approach", "nature", "type", "site")

BUILTIN_KEYWORDS: dict[str, list[str]] = {k: list(dict.fromkeys(v.split())) for k, v in LISTS.items()}

# Words that open or close many names without being keywords: "其他…", "未特指的…",
# "…,未特指". The miner (keywords.mine_keywords) never proposes a word containing them.
QUALIFIERS = """
其他 其它 未特指 特指 未分类 不可归类 未知 不明 待查 可疑 疑似 可能 除外 不伴 伴有 伴 并 和 及 或 与 的 由于
所致 引起 造成 后遗症 状态 个人史 家族史
"""
QUALIFIER_WORDS: list[str] = QUALIFIERS.split()

# Words the tagger matches but reports as nothing: they stop a keyword from
# being read inside them (指 is a site, but not in 未特指 or 指数; 心 not in 中心).
BLOCKERS = """
未特指 特指 其他 其它 未分类 不可归类 不明原因 指数 指标 指导 指征 中心 心理 心情 心因性 放心 点头 手段
头孢 肝素 胆固醇 胆红素 胃口 脾气 眼神 耳鸣 面积 唇腭裂 肠道病毒
"""
BLOCKER_WORDS: list[str] = BLOCKERS.split()
