//! The surname table of [`super::pinyin`]: the surname reading of characters whose common
//! reading is another, and compound surnames.
//!
//! Add a surname here when its surname reading is not the pinyin crate's first reading of the
//! character (a lookup by the usual spelling finds nothing), or when it is a two-character
//! surname (its initials must come out per character). The first entry that starts a name wins,
//! so a compound surname is listed before any single character it starts with.

/// Surnames whose reading differs from the character's most common reading, plus compound
/// surnames. The pinyin crate gives the most frequent reading of a character (曾 → ceng), which
/// is the known complaint about ES pinyin plugins; as the first character of a name these are
/// surnames and read this way. Compound surnames list one reading per character, separated by
/// a space, so their initials come out right (欧阳修 → `oyx`).
pub(super) const SURNAME_READINGS: &[(&str, &str)] = &[
    ("欧阳", "ou yang"),
    ("司马", "si ma"),
    ("诸葛", "zhu ge"),
    ("上官", "shang guan"),
    ("尉迟", "yu chi"),
    ("万俟", "mo qi"),
    ("长孙", "zhang sun"),
    ("单于", "chan yu"),
    ("令狐", "ling hu"),
    ("皇甫", "huang fu"),
    ("澹台", "tan tai"),
    ("公孙", "gong sun"),
    ("夏侯", "xia hou"),
    ("东方", "dong fang"),
    ("慕容", "mu rong"),
    ("曾", "zeng"),
    ("单", "shan"),
    ("仇", "qiu"),
    ("解", "xie"),
    ("区", "ou"),
    ("朴", "piao"),
    ("查", "zha"),
    ("翟", "zhai"),
    ("乐", "yue"),
    ("盖", "ge"),
    ("缪", "miao"),
    ("秘", "bi"),
    ("覃", "qin"),
    ("尉", "yu"),
    ("那", "na"),
    ("任", "ren"),
    ("员", "yun"),
    ("句", "gou"),
    ("种", "chong"),
    ("召", "shao"),
    ("折", "she"),
    ("繁", "po"),
    ("纪", "ji"),
    ("燕", "yan"),
    ("都", "du"),
    ("宁", "ning"),
    ("沈", "shen"),
    ("重", "chong"),
    ("薄", "bo"),
    ("蕃", "pi"),
    ("黑", "he"),
    ("车", "che"),
    ("贾", "jia"),
    ("柏", "bai"),
    ("华", "hua"),
    ("曲", "qu"),
    ("长", "chang"),
    ("过", "guo"),
    ("隗", "wei"),
    ("阚", "kan"),
    // Surnames read with ü whose characters have other readings too (女 is also rǔ, 绿 also
    // lù): as a surname only the ü reading is right, and it is the one people type.
    ("女", "nü"),
    ("绿", "lü"),
];
