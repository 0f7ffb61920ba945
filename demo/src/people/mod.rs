//! Deterministic, realistic-looking customer records for `hbidx demo`, the benchmark and the
//! tests.
//!
//! Every [`Person`] has a sequential uid (`u00000001`, …), a Chinese name drawn with real surname
//! frequencies (or, for ~3% of people, a Latin name), a valid mainland mobile number and a valid
//! 18-digit PRC resident idcard whose region code gives the `city`.
//!
//! Phones and idcards are unique across the whole stream without any set: person `i` gets
//! `perm(i)` for a seed-keyed bijection `perm` (a small Feistel network with cycle walking), so
//! distinct indices can never collide. Everything else comes from `ChaCha8Rng::seed_from_u64`,
//! so a given seed always yields the same people, in the same order.
//!
//! About 5% of people reuse a name from a pool of 200 popular full names (which starts with
//! `张三` and `李四`, the names the docs use), so name lookups return several rows; the first two
//! male people are always `张三` and `李四`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One generated customer row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Person {
    /// `u` + 8-digit sequence number, starting at `u00000001`.
    pub uid: String,
    pub name: String,
    /// 11-digit mainland mobile number.
    pub phone: String,
    /// 18-character PRC resident idcard with a valid MOD 11-2 check character.
    pub idcard: String,
    /// The city of the idcard's region code, e.g. `北京`.
    pub city: String,
}

/// Infinite-looking (well, 99,999,999 people: the uid width) deterministic stream of [`Person`]s.
pub struct PeopleGen {
    rng: ChaCha8Rng,
    /// Index of the next person (0-based; uid is `next + 1`).
    next: u64,
    surname_cum: Vec<u32>,
    surname_names: Vec<&'static str>,
    pool_male: Vec<String>,
    pool_female: Vec<String>,
    phone_perm: Perm,
    idcard_perm: Perm,
    /// How many of 张三 / 李四 have been handed out to the first male people.
    forced_given: u8,
}

/// uids are 8 digits wide, so the stream stops after this many people. It also bounds the phone
/// permutation domain (10^8 suffixes per prefix).
const MAX_PEOPLE: u64 = 99_999_999;
/// The phone suffixes' domain: 8 digits.
const PHONE_SUFFIXES: u64 = 100_000_000;

/// Per 100,000: share of people with a Latin name, and share reusing a popular pooled name.
const LATIN_PER_100K: u32 = 3_000;
const SHARED_PER_100K: u32 = 5_000;
/// Per 100: share of Chinese given names with a single character.
const SINGLE_GIVEN_PCT: u32 = 25;
const POOL_PER_GENDER: usize = 100;

impl PeopleGen {
    pub fn new(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);

        let mut surname_cum = Vec::with_capacity(256);
        let mut surname_names = Vec::with_capacity(256);
        let mut acc = 0u32;
        let mut push = |name: &'static str, w: u32| {
            acc += w;
            surname_cum.push(acc);
            surname_names.push(name);
        };
        for &(s, w) in TOP_SURNAMES.iter().chain(RARE_SURNAMES) {
            push(s, w);
        }
        // The long tail: whatever the listed surnames leave of 100%, spread evenly.
        let tail = tail_weight();
        let per = tail / TAIL_SURNAMES.len() as u32;
        for (i, &s) in TAIL_SURNAMES.iter().enumerate() {
            let extra = u32::from((i as u32) < tail % TAIL_SURNAMES.len() as u32);
            push(s, per + extra);
        }

        let phone_perm = Perm::new(PHONE_SUFFIXES, &mut rng);
        let idcard_perm = Perm::new(idcard_space(), &mut rng);

        let mut g = PeopleGen {
            rng,
            next: 0,
            surname_cum,
            surname_names,
            pool_male: Vec::with_capacity(POOL_PER_GENDER),
            pool_female: Vec::with_capacity(POOL_PER_GENDER),
            phone_perm,
            idcard_perm,
            forced_given: 0,
        };
        g.build_pools();
        g
    }

    /// The stream from person `first` (0-based) on, without generating the people before it:
    /// uids, idcards and the phones' last 8 digits are those `new(seed).skip(first)` gives
    /// (functions of the index, so unique as theirs are); phone prefixes and names are drawn
    /// afresh. For writing rows past a loaded table's: `skip` generates
    /// each skipped person (~1 µs), seconds of a core at 10M rows.
    pub fn starting_at(seed: u64, first: u64) -> Self {
        let mut g = Self::new(seed);
        g.next = first.min(MAX_PEOPLE);
        if first > 0 {
            // 张三 and 李四 belong to the stream's first men.
            g.forced_given = 2;
        }
        g
    }

    fn build_pools(&mut self) {
        let mut male: Vec<String> = POPULAR_MALE.iter().map(|s| s.to_string()).collect();
        let mut female: Vec<String> = POPULAR_FEMALE.iter().map(|s| s.to_string()).collect();
        for (pool, is_male) in [(&mut male, true), (&mut female, false)] {
            while pool.len() < POOL_PER_GENDER {
                let mut name = String::with_capacity(12);
                // Popular names: mostly top-20 surnames.
                let s = if self.rng.random_range(0..4u32) == 0 {
                    self.pick_surname()
                } else {
                    TOP_SURNAMES[self.rng.random_range(0..20usize)].0
                };
                name.push_str(s);
                self.push_given(&mut name, is_male);
                if !pool.contains(&name) {
                    pool.push(name);
                }
            }
        }
        self.pool_male = male;
        self.pool_female = female;
    }

    fn pick_surname(&mut self) -> &'static str {
        let total = *self.surname_cum.last().expect("surname table is not empty");
        let x = self.rng.random_range(0..total);
        let i = self.surname_cum.partition_point(|&c| c <= x);
        self.surname_names[i]
    }

    fn push_given(&mut self, name: &mut String, male: bool) {
        let gendered = if male { GIVEN_MALE } else { GIVEN_FEMALE };
        let n = gendered.len() + GIVEN_NEUTRAL.len();
        let chars = if self.rng.random_range(0..100u32) < SINGLE_GIVEN_PCT {
            1
        } else {
            2
        };
        for _ in 0..chars {
            let k = self.rng.random_range(0..n);
            name.push_str(if k < gendered.len() {
                gendered[k]
            } else {
                GIVEN_NEUTRAL[k - gendered.len()]
            });
        }
    }

    /// Person `i`'s phone: a random prefix and the unique 8-digit suffix perm(i).
    fn phone_of(&mut self, i: u64) -> String {
        let prefix = PHONE_PREFIXES[self.rng.random_range(0..PHONE_PREFIXES.len())];
        let mut phone = String::with_capacity(11);
        phone.push_str(prefix);
        push_digits(&mut phone, self.phone_perm.apply(i), 8);
        phone
    }

    /// New contact details for an existing person, as an update gives them: `(phone, name)`,
    /// the phone that person `fresh` of this seed's stream would get (so none of the first
    /// `fresh` people has it; `fresh` wraps at 10^8) and a name drawn afresh.
    pub fn new_contact(&mut self, fresh: u64) -> (String, String) {
        let phone = self.phone_of(fresh % PHONE_SUFFIXES);
        let male = self.rng.random_bool(0.5);
        (phone, self.make_name(male))
    }

    fn make_name(&mut self, male: bool) -> String {
        if male && self.forced_given < 2 {
            self.forced_given += 1;
            return POPULAR_MALE[usize::from(self.forced_given - 1)].to_string();
        }
        let roll = self.rng.random_range(0..100_000u32);
        if roll < LATIN_PER_100K {
            let firsts = if male {
                LATIN_FIRST_MALE
            } else {
                LATIN_FIRST_FEMALE
            };
            let first = firsts[self.rng.random_range(0..firsts.len())];
            let last = LATIN_LAST[self.rng.random_range(0..LATIN_LAST.len())];
            let mut s = String::with_capacity(first.len() + 1 + last.len());
            s.push_str(first);
            s.push(' ');
            s.push_str(last);
            return s;
        }
        if roll < LATIN_PER_100K + SHARED_PER_100K {
            let pool = if male {
                &self.pool_male
            } else {
                &self.pool_female
            };
            // min of two uniforms: earlier (more famous) entries are picked more often.
            let a = self.rng.random_range(0..pool.len());
            let b = self.rng.random_range(0..pool.len());
            return pool[a.min(b)].clone();
        }
        let mut s = String::with_capacity(12);
        s.push_str(self.pick_surname());
        self.push_given(&mut s, male);
        s
    }
}

impl Iterator for PeopleGen {
    type Item = Person;

    fn next(&mut self) -> Option<Person> {
        if self.next >= MAX_PEOPLE {
            return None;
        }
        let i = self.next;
        self.next += 1;

        let uid = uid_of(i);

        // idcard: perm(i) decodes to (region, birth day, sequence), hence unique.
        let x = self.idcard_perm.apply(i);
        let seq = (x % ID_SEQ_COUNT) + 1; // 001..=999
        let rest = x / ID_SEQ_COUNT;
        let day = rest % birth_day_count();
        let region = &REGIONS[(rest / birth_day_count()) as usize];
        let male = seq % 2 == 1;
        let (y, m, d) = civil_from_days(days_from_civil(BIRTH_FIRST_YEAR, 1, 1) + day as i64);
        let mut body = [0u8; 18];
        body[..6].copy_from_slice(region.0.as_bytes());
        write_digits(&mut body[6..10], y as u64);
        write_digits(&mut body[10..12], u64::from(m));
        write_digits(&mut body[12..14], u64::from(d));
        write_digits(&mut body[14..17], seq);
        body[17] = idcard_check_char(&body[..17]);
        let idcard = String::from_utf8(body.to_vec()).expect("idcard is ASCII");

        let phone = self.phone_of(i);

        let name = self.make_name(male);

        Some(Person {
            uid,
            name,
            phone,
            idcard,
            city: region.1.to_string(),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(MAX_PEOPLE - self.next).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

/// The uid of person `i` (0-based) of any stream: `u` + the 8-digit `i + 1`.
pub fn uid_of(i: u64) -> String {
    let mut uid = String::with_capacity(9);
    uid.push('u');
    push_digits(&mut uid, i + 1, 8);
    uid
}

/// A valid idcard of Dongcheng, Beijing (110101) for a `YYYYMMDD` birth date and a 3-digit
/// sequence number, for tests that need a few known idcards rather than a stream of people.
pub fn idcard_born(birth: &str, seq: u32) -> String {
    let first17 = format!("110101{birth}{seq:03}");
    let check = hbidx_schema::normalize::idcard_check_digit(&first17).expect("17 digits");
    format!("{first17}{check}")
}

/// The first `n` people for `seed`.
#[cfg(test)]
pub fn generate(n: usize, seed: u64) -> Vec<Person> {
    let mut out = Vec::with_capacity(n);
    out.extend(PeopleGen::new(seed).take(n));
    out
}

// ---------------------------------------------------------------------------------------------
// Bijection on [0, n): balanced Feistel network over 2^(2h) >= n, with cycle walking.

struct Perm {
    n: u64,
    half_bits: u32,
    mask: u64,
    keys: [u64; 4],
}

impl Perm {
    fn new(n: u64, rng: &mut ChaCha8Rng) -> Self {
        assert!(n >= 2);
        let bits = 64 - (n - 1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        Perm {
            n,
            half_bits,
            mask: (1u64 << half_bits) - 1,
            keys: [rng.random(), rng.random(), rng.random(), rng.random()],
        }
    }

    fn feistel(&self, x: u64) -> u64 {
        let mut l = x >> self.half_bits;
        let mut r = x & self.mask;
        for &k in &self.keys {
            let f = mix64(r ^ k) & self.mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// `i` must be `< n`. The Feistel network permutes [0, 2^(2h)); walking its cycle until we
    /// land back inside [0, n) restricts it to a permutation of [0, n).
    fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.feistel(i);
        while x >= self.n {
            x = self.feistel(x);
        }
        x
    }
}

/// splitmix64 finaliser.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------------------------
// idcard helpers.

const ID_WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
const ID_CHECK_CHARS: &[u8; 11] = b"10X98765432";
const ID_SEQ_COUNT: u64 = 999;
const BIRTH_FIRST_YEAR: i32 = 1950;
const BIRTH_LAST_YEAR: i32 = 2005;

/// ISO 7064 MOD 11-2 check character of the first 17 (ASCII digit) characters of an idcard.
fn idcard_check_char(body: &[u8]) -> u8 {
    debug_assert_eq!(body.len(), 17);
    let sum: u32 = body
        .iter()
        .zip(ID_WEIGHTS)
        .map(|(&c, w)| u32::from(c - b'0') * w)
        .sum();
    ID_CHECK_CHARS[(sum % 11) as usize]
}

fn birth_day_count() -> u64 {
    (days_from_civil(BIRTH_LAST_YEAR, 12, 31) - days_from_civil(BIRTH_FIRST_YEAR, 1, 1) + 1) as u64
}

fn idcard_space() -> u64 {
    REGIONS.len() as u64 * birth_day_count() * ID_SEQ_COUNT
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = i64::from(if m <= 2 { y - 1 } else { y });
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i32, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m, d)
}

/// Writes `v` as zero-padded decimal filling `out` exactly (high digits dropped).
fn write_digits(out: &mut [u8], mut v: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

fn push_digits(s: &mut String, v: u64, width: usize) {
    let mut buf = [0u8; 20];
    write_digits(&mut buf[..width], v);
    s.push_str(std::str::from_utf8(&buf[..width]).expect("digits are ASCII"));
}

// ---------------------------------------------------------------------------------------------
// Tables.

/// Real district codes and their city. Big cities get several districts (hence more people).
#[rustfmt::skip]
const REGIONS: &[(&str, &str)] = &[
    ("110101", "北京"), // 东城
    ("110105", "北京"), // 朝阳
    ("110108", "北京"), // 海淀
    ("310104", "上海"), // 徐汇
    ("310115", "上海"), // 浦东新区
    ("440106", "广州"), // 天河
    ("440304", "深圳"), // 福田
    ("440305", "深圳"), // 南山
    ("330106", "杭州"), // 西湖
    ("510107", "成都"), // 武侯
    ("500103", "重庆"), // 渝中
    ("120101", "天津"), // 和平
    ("320102", "南京"), // 玄武
    ("320506", "苏州"), // 吴中
    ("420106", "武汉"), // 武昌
    ("610113", "西安"), // 雁塔
    ("430104", "长沙"), // 岳麓
    ("370102", "济南"), // 历下
    ("370202", "青岛"), // 市南
    ("210102", "沈阳"), // 和平
    ("210202", "大连"), // 中山
    ("230103", "哈尔滨"), // 南岗
    ("220102", "长春"), // 南关
    ("410105", "郑州"), // 金水
    ("350102", "福州"), // 鼓楼
    ("350203", "厦门"), // 思明
    ("530102", "昆明"), // 五华
    ("450103", "南宁"), // 青秀
    ("520103", "贵阳"), // 云岩
    ("340104", "合肥"), // 蜀山
    ("360102", "南昌"), // 东湖
    ("130102", "石家庄"), // 长安
    ("140105", "太原"), // 小店
    ("620102", "兰州"), // 城关
    ("650102", "乌鲁木齐"), // 天山
];

/// Mainland mobile prefixes (China Mobile, Unicom, Telecom). Listed once each: uniform.
#[rustfmt::skip]
const PHONE_PREFIXES: &[&str] = &[
    "134", "135", "136", "137", "138", "139", "147", "150", "151", "152", "157", "158", "159",
    "178", "182", "183", "184", "187", "188", "198", // China Mobile
    "130", "131", "132", "155", "156", "166", "175", "176", "185", "186", // China Unicom
    "133", "153", "177", "180", "181", "189", "199", "191", // China Telecom
];

/// The ~100 most common surnames with their population share per 100,000 (王 7.12%, …).
#[rustfmt::skip]
const TOP_SURNAMES: &[(&str, u32)] = &[
    ("王", 7120), ("李", 7090), ("张", 6310), ("刘", 5380), ("陈", 4610), ("杨", 3220),
    ("黄", 2450), ("赵", 2190), ("吴", 2000), ("周", 1950), ("徐", 1450), ("孙", 1380),
    ("马", 1290), ("朱", 1260), ("胡", 1160), ("郭", 1150), ("何", 1120), ("高", 1060),
    ("林", 1050), ("罗", 980), ("郑", 850), ("梁", 830), ("谢", 740), ("宋", 660),
    ("唐", 640), ("许", 610), ("韩", 600), ("冯", 590), ("邓", 580), ("曹", 550),
    ("彭", 550), ("曾", 540), ("肖", 520), ("田", 510), ("董", 500), ("袁", 490),
    ("潘", 470), ("于", 460), ("蒋", 450), ("蔡", 450), ("余", 440), ("杜", 430),
    ("叶", 430), ("程", 420), ("苏", 410), ("魏", 400), ("吕", 390), ("丁", 380),
    ("任", 370), ("沈", 360), ("姚", 350), ("卢", 350), ("姜", 340), ("崔", 330),
    ("钟", 320), ("谭", 310), ("陆", 310), ("汪", 300), ("范", 300), ("金", 290),
    ("石", 290), ("廖", 280), ("贾", 270), ("夏", 270), ("韦", 270), ("付", 260),
    ("方", 260), ("白", 250), ("邹", 250), ("孟", 240), ("熊", 240), ("秦", 240),
    ("邱", 230), ("江", 230), ("尹", 220), ("薛", 220), ("闫", 210), ("段", 210),
    ("雷", 210), ("侯", 200), ("龙", 200), ("史", 200), ("陶", 190), ("黎", 190),
    ("贺", 190), ("顾", 180), ("毛", 180), ("郝", 180), ("龚", 170), ("邵", 170),
    ("万", 170), ("钱", 170), ("严", 160), ("覃", 160), ("武", 160), ("戴", 160),
    ("莫", 150), ("孔", 150), ("向", 150), ("汤", 150),
];

/// Polyphonic surnames (read differently as a surname: 单 Shàn, 仇 Qiú, 解 Xiè, 区 Ōu, 朴 Piáo,
/// 查 Zhā, 翟 Zhái, 乐 Yuè; 曾 Zēng is in the top list) and compound surnames, small weights.
#[rustfmt::skip]
const RARE_SURNAMES: &[(&str, u32)] = &[
    ("单", 40), ("仇", 15), ("解", 30), ("区", 10), ("朴", 20), ("查", 15), ("翟", 90),
    ("乐", 15), ("欧阳", 30), ("司马", 8), ("诸葛", 5), ("上官", 5),
];

/// The long tail: shares the rest of 100% (~18%) evenly, ~0.14% each, i.e. just below the
/// 100th surname.
#[rustfmt::skip]
const TAIL_SURNAMES: &[&str] = &[
    "常", "康", "安", "易", "乔", "赖", "文", "牛", "樊", "葛", "邢", "施", "洪", "季", "温",
    "齐", "庞", "颜", "倪", "涂", "殷", "耿", "聂", "欧", "童", "柴", "焦", "鲁", "祝", "申",
    "左", "游", "甘", "岳", "尤", "梅", "关", "苗", "褚", "蓝", "纪", "盛", "伍", "舒", "柯",
    "辛", "管", "房", "屈", "包", "俞", "骆", "章", "宁", "柳", "凌", "霍", "裴", "毕", "卓",
    "詹", "阮", "喻", "巩", "滕", "戚", "祁", "符", "谷", "钮", "鲍", "艾", "车", "冉", "柏",
    "邬", "卜", "麦", "池", "尚", "奚", "米", "丰", "窦", "芦", "练", "戈", "路", "靳", "娄",
    "沙", "丛", "简", "姬", "薄", "蒙", "边", "桑", "宫", "翁", "扈", "甄", "穆", "虞", "项",
    "刁", "谈", "饶", "晏", "卞", "缪", "闵", "费", "邝", "杭", "荆", "占", "时", "佘", "佟",
    "闻", "容", "瞿", "连", "冷", "景", "粟", "岑", "蒲", "屠",
];

fn tail_weight() -> u32 {
    let listed: u32 = TOP_SURNAMES
        .iter()
        .chain(RARE_SURNAMES)
        .map(|&(_, w)| w)
        .sum();
    100_000u32.saturating_sub(listed)
}

#[rustfmt::skip]
const GIVEN_MALE: &[&str] = &[
    "伟", "强", "磊", "军", "洋", "勇", "杰", "涛", "明", "超", "刚", "建", "国", "辉", "鹏",
    "斌", "波", "宇", "浩", "凯", "健", "俊", "帆", "帅", "旭", "龙", "峰", "鑫", "博", "亮",
    "成", "志", "东", "海", "兵", "飞", "毅", "彬", "锋", "德", "振", "宏", "庆", "永", "良",
    "胜", "祥", "荣", "豪", "铭", "睿", "轩", "泽", "昊", "晨",
];

#[rustfmt::skip]
const GIVEN_FEMALE: &[&str] = &[
    "芳", "娜", "敏", "静", "丽", "艳", "娟", "秀", "霞", "桂", "英", "玉", "兰", "萍", "红",
    "梅", "琳", "燕", "莉", "雪", "婷", "慧", "颖", "倩", "琴", "晶", "洁", "丹", "蓉", "珍",
    "凤", "佳", "欣", "怡", "悦", "淑", "惠", "薇", "露", "彤", "妍", "琪", "涵", "萱", "诗",
    "梦", "雅", "月", "璐", "菲", "瑶", "蕾",
];

#[rustfmt::skip]
const GIVEN_NEUTRAL: &[&str] = &[
    "华", "文", "平", "春", "晓", "小", "子", "嘉", "一", "思", "安", "家", "天", "新", "宁",
    "林", "清", "雨", "秋", "青", "光", "金", "乐", "卫", "若", "可", "心", "书", "正", "元",
    "中", "和", "方", "云", "阳", "立", "昕", "航", "逸", "然",
];

/// Seeds of the shared-name pools; the most famous first (earlier entries are picked more).
/// `张三` and `李四` must stay at indices 0 and 1 (the first two male people get them).
#[rustfmt::skip]
const POPULAR_MALE: &[&str] = &[
    "张三", "李四", "张伟", "王伟", "李伟", "刘伟", "李强", "王磊", "刘洋", "张勇", "王勇",
    "李军", "张杰", "王军", "李杰", "张磊", "王强", "张涛", "王刚", "李明", "刘杰", "陈杰",
    "王超", "张鹏", "王鹏", "李刚", "王浩", "陈伟", "杨伟", "王五", "赵六",
];

#[rustfmt::skip]
const POPULAR_FEMALE: &[&str] = &[
    "王芳", "李娜", "张敏", "李静", "王静", "张丽", "王丽", "李敏", "王敏", "张静", "王秀英",
    "李秀英", "张秀英", "刘芳", "陈静", "张燕", "李艳", "王艳", "张艳", "李娟", "王娟", "刘敏",
    "杨静", "陈丽", "王霞", "李霞", "张婷", "李丽", "张芳", "王燕",
];

#[rustfmt::skip]
const LATIN_FIRST_MALE: &[&str] = &[
    "John", "James", "Michael", "David", "Robert", "William", "Daniel", "Thomas", "Peter",
    "Mark", "Paul", "Richard", "Andrew", "Kevin", "Brian", "George", "Anthony", "Steven",
    "Carlos", "Luis",
];

#[rustfmt::skip]
const LATIN_FIRST_FEMALE: &[&str] = &[
    "Maria", "Mary", "Anna", "Sarah", "Emma", "Laura", "Linda", "Jennifer", "Elizabeth",
    "Susan", "Lisa", "Emily", "Sophie", "Julia", "Olivia", "Helen", "Kate", "Grace", "Lucia",
    "Elena",
];

#[rustfmt::skip]
const LATIN_LAST: &[&str] = &[
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
    "Martinez", "Wilson", "Anderson", "Taylor", "Thomas", "Moore", "Martin", "Lee", "Thompson",
    "White", "Harris", "Clark", "Lewis", "Walker", "Young", "Allen", "King", "Wright", "Scott",
    "Green", "Baker", "Adams", "Nelson", "Hill", "Campbell", "Mitchell", "Roberts", "Carter",
    "Evans", "Turner", "Lopez",
];

#[cfg(test)]
mod tests;
