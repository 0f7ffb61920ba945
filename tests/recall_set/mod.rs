//! The name recall set: a deterministic list of people and every way a person at a call centre
//! or on a KYC form types each of them (issue 37), with what each typed form must find.
//!
//! The readings typed are written out by hand (with tones), not asked of the code under test:
//! the set is the oracle. Its self-check ([`check_readings`]) makes sure each is the pinyin
//! data's first reading of its character (or the surname reading the index must use), and the
//! precision oracle ([`Person::answers`]) accepts the data's other readings of a character too
//! (王 also reads yu there), except for the polyphonic surnames, which must be read as surnames
//! only: a name that answers a typed form it should not is a real precision failure.

#![allow(dead_code)]

use std::collections::BTreeSet;

/// A surname: simplified, traditional, one reading per character with its tone number.
type Surname = (&'static str, &'static str, &'static [&'static str]);

/// Common surnames; the polyphonic ones read as surnames (曾 zeng, 单 shan …), the ü ones, and
/// two-character ones.
const SURNAMES: &[Surname] = &[
    ("张", "張", &["zhang1"]),
    ("王", "王", &["wang2"]),
    ("李", "李", &["li3"]),
    ("刘", "劉", &["liu2"]),
    ("陈", "陳", &["chen2"]),
    ("杨", "楊", &["yang2"]),
    ("黄", "黃", &["huang2"]),
    ("赵", "趙", &["zhao4"]),
    ("吴", "吳", &["wu2"]),
    ("周", "周", &["zhou1"]),
    ("徐", "徐", &["xu2"]),
    ("孙", "孫", &["sun1"]),
    ("马", "馬", &["ma3"]),
    ("朱", "朱", &["zhu1"]),
    ("胡", "胡", &["hu2"]),
    ("郭", "郭", &["guo1"]),
    ("林", "林", &["lin2"]),
    ("罗", "羅", &["luo2"]),
    ("郑", "鄭", &["zheng4"]),
    ("梁", "梁", &["liang2"]),
    ("谢", "謝", &["xie4"]),
    ("韩", "韓", &["han2"]),
    ("冯", "馮", &["feng2"]),
    ("邓", "鄧", &["deng4"]),
    ("蒋", "蔣", &["jiang3"]),
    ("苏", "蘇", &["su1"]),
    ("卢", "盧", &["lu2"]),
    ("钱", "錢", &["qian2"]),
    ("龙", "龍", &["long2"]),
    ("路", "路", &["lu4"]),
    ("詹", "詹", &["zhan1"]),
    ("湛", "湛", &["zhan4"]),
    // Polyphonic: the surname reading is not the character's common one.
    ("单", "單", &["shan4"]),
    ("曾", "曾", &["zeng1"]),
    ("解", "解", &["xie4"]),
    ("仇", "仇", &["qiu2"]),
    ("区", "區", &["ou1"]),
    ("朴", "樸", &["piao2"]),
    ("查", "查", &["zha1"]),
    ("盖", "蓋", &["ge3"]),
    ("乐", "樂", &["yue4"]),
    // ü.
    ("吕", "呂", &["lü3"]),
    ("女", "女", &["nü3"]),
    ("绿", "綠", &["lü4"]),
    ("律", "律", &["lü4"]),
    ("闾", "閭", &["lü2"]),
    // Two characters.
    ("欧阳", "歐陽", &["ou1", "yang2"]),
    ("司马", "司馬", &["si1", "ma3"]),
];

/// Surnames whose characters have other readings too: the index must read them as surnames.
const POLYPHONIC_SURNAMES: &[&str] = &[
    "单", "曾", "解", "仇", "区", "朴", "查", "盖", "乐", "女", "绿",
];

/// Given-name characters: simplified, traditional, reading. Each reads one way only, and none
/// starts a compound surname after any surname above.
const GIVEN: &[(char, char, &str)] = &[
    ('三', '三', "san1"),
    ('丰', '豐', "feng1"),
    ('中', '中', "zhong1"),
    ('伟', '偉', "wei3"),
    ('芳', '芳', "fang1"),
    ('娜', '娜', "na4"),
    ('敏', '敏', "min3"),
    ('静', '靜', "jing4"),
    ('丽', '麗', "li4"),
    ('强', '強', "qiang2"),
    ('磊', '磊', "lei3"),
    ('军', '軍', "jun1"),
    ('杰', '傑', "jie2"),
    ('涛', '濤', "tao1"),
    ('明', '明', "ming2"),
    ('超', '超', "chao1"),
    ('秀', '秀', "xiu4"),
    ('霞', '霞', "xia2"),
    ('刚', '剛', "gang1"),
    ('英', '英', "ying1"),
    ('国', '國', "guo2"),
    ('志', '志', "zhi4"),
    ('海', '海', "hai3"),
    ('鹏', '鵬', "peng2"),
    ('宇', '宇', "yu3"),
    ('浩', '浩', "hao4"),
    ('凯', '凱', "kai3"),
    ('婷', '婷', "ting2"),
    ('雪', '雪', "xue3"),
    ('琳', '琳', "lin2"),
    ('晨', '晨', "chen2"),
    ('欣', '欣', "xin1"),
    ('辉', '輝', "hui1"),
    ('斌', '斌', "bin1"),
    ('亮', '亮', "liang4"),
    ('龙', '龍', "long2"),
    ('兰', '蘭', "lan2"),
    ('凤', '鳳', "feng4"),
    ('红', '紅', "hong2"),
    ('飞', '飛', "fei1"),
    ('春', '春', "chun1"),
    ('梅', '梅', "mei2"),
    ('鑫', '鑫', "xin1"),
    ('颖', '穎', "ying3"),
    ('东', '東', "dong1"),
    ('文', '文', "wen2"),
    ('燕', '燕', "yan4"),
    ('玲', '玲', "ling2"),
    ('波', '波', "bo1"),
    ('民', '民', "min2"),
    ('安', '安', "an1"),
    ('宁', '寧', "ning2"),
];

const LATIN_FIRST: &[&str] = &[
    "John", "Maria", "David", "Anna", "Peter", "Laura", "Michael", "Sofia", "James", "Emma",
    "Ahmed", "Olga",
];
const LATIN_LAST: &[&str] = &[
    "Smith", "Garcia", "Müller", "Rossi", "Dubois", "Novak", "Kim", "Nguyen", "Silva", "Cohen",
    "Okafor", "Jensen", "O'Brien", "Van Dijk",
];

/// One generated person.
#[derive(Debug, Clone)]
pub struct Person {
    pub key: String,
    /// The name as stored (simplified, traditional, or with a space between surname and
    /// given name).
    pub stored: String,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub enum Kind {
    Chinese {
        /// The name in simplified characters, no spaces: what every typed form folds to.
        simplified: String,
        traditional: String,
        surname_chars: usize,
        /// Readings with tone numbers, one per character.
        readings: Vec<&'static str>,
    },
    Latin {
        first: &'static str,
        last: &'static str,
    },
}

/// How a typed form is looked up: the `match` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    Exact,
    Prefix,
    Pinyin,
    PinyinPrefix,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::Prefix => "prefix",
            Mode::Pinyin => "pinyin",
            Mode::PinyinPrefix => "pinyin_prefix",
        }
    }
}

/// One way of typing a person: `name=<text>&match=<mode>`, and what kind of typing it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Typed {
    pub mode: Mode,
    pub text: String,
    pub how: &'static str,
}

/// `count` people, the same list every run: about one in ten Latin, one in five Chinese names
/// stored in traditional characters, one in seven stored with a space after the surname.
pub fn people(count: usize) -> Vec<Person> {
    let mut out = Vec::with_capacity(count);
    // The names of issue 37's table first.
    for (i, (surname, given)) in [
        ("张", '三'),
        ("吕", '中'),
        ("路", '中'),
        ("詹", '民'),
        ("湛", '安'),
    ]
    .into_iter()
    .enumerate()
    {
        let surname = SURNAMES
            .iter()
            .position(|(s, _, _)| *s == surname)
            .expect("surname");
        let given = GIVEN
            .iter()
            .position(|(c, _, _)| *c == given)
            .expect("given");
        out.push(chinese(
            format!("p{i:05}"),
            surname,
            &[given],
            Stored::Simplified,
        ));
    }
    let mut i = out.len();
    while out.len() < count {
        let key = format!("p{i:05}");
        if i % 10 == 7 {
            let first = LATIN_FIRST[(i * 7) % LATIN_FIRST.len()];
            let last = LATIN_LAST[(i * 11 / 10) % LATIN_LAST.len()];
            out.push(Person {
                key,
                stored: format!("{first} {last}"),
                kind: Kind::Latin { first, last },
            });
        } else {
            let surname = (i * 13) % SURNAMES.len();
            let first = (i * 7 + i / SURNAMES.len()) % GIVEN.len();
            let second = (i * 29 + 3) % GIVEN.len();
            let given: Vec<usize> = if i % 3 == 0 {
                vec![first]
            } else {
                vec![first, second]
            };
            let stored = match i % 35 {
                0 | 5 | 10 | 15 | 20 | 25 | 30 => Stored::Traditional,
                3 | 17 | 24 => Stored::Spaced,
                _ => Stored::Simplified,
            };
            out.push(chinese(key, surname, &given, stored));
        }
        i += 1;
    }
    out
}

enum Stored {
    Simplified,
    Traditional,
    Spaced,
}

fn chinese(key: String, surname: usize, given: &[usize], stored: Stored) -> Person {
    let (simple, traditional, surname_readings) = SURNAMES[surname];
    let mut simplified = simple.to_string();
    let mut trad = traditional.to_string();
    let mut readings: Vec<&'static str> = surname_readings.to_vec();
    for &g in given {
        let (s, t, reading) = GIVEN[g];
        simplified.push(s);
        trad.push(t);
        readings.push(reading);
    }
    let stored = match stored {
        Stored::Simplified => simplified.clone(),
        Stored::Traditional => trad.clone(),
        Stored::Spaced => format!("{simple} {}", &simplified[simple.len()..]),
    };
    Person {
        key,
        stored,
        kind: Kind::Chinese {
            simplified,
            traditional: trad,
            surname_chars: surname_readings.len(),
            readings,
        },
    }
}

/// A reading without its tone number.
fn plain(reading: &str) -> &str {
    reading.trim_end_matches(|c: char| c.is_ascii_digit())
}

fn tone(reading: &str) -> u32 {
    reading
        .chars()
        .last()
        .and_then(|c| c.to_digit(10))
        .unwrap_or(5)
}

/// A reading with its tone mark: on `a` or `e` if there is one, on the `o` of `ou`, else on the
/// last vowel.
fn with_tone_mark(reading: &str) -> String {
    let syllable = plain(reading);
    let tone = tone(reading);
    if !(1..=4).contains(&tone) {
        return syllable.to_string();
    }
    let marks: &[(char, [char; 4])] = &[
        ('a', ['ā', 'á', 'ǎ', 'à']),
        ('e', ['ē', 'é', 'ě', 'è']),
        ('i', ['ī', 'í', 'ǐ', 'ì']),
        ('o', ['ō', 'ó', 'ǒ', 'ò']),
        ('u', ['ū', 'ú', 'ǔ', 'ù']),
        ('ü', ['ǖ', 'ǘ', 'ǚ', 'ǜ']),
    ];
    let chars: Vec<char> = syllable.chars().collect();
    let vowel = |c: char| marks.iter().any(|(v, _)| *v == c);
    let at = chars
        .iter()
        .position(|&c| c == 'a' || c == 'e')
        .or_else(|| {
            syllable
                .find("ou")
                .map(|_| chars.iter().position(|&c| c == 'o').unwrap_or(0))
        })
        .or_else(|| chars.iter().rposition(|&c| vowel(c)))
        .unwrap_or(0);
    chars
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            if i == at {
                marks
                    .iter()
                    .find(|(v, _)| *v == c)
                    .map_or(c, |(_, m)| m[tone as usize - 1])
            } else {
                c
            }
        })
        .collect()
}

fn capitalised(syllables: &str) -> String {
    let mut chars = syllables.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

impl Person {
    /// Every way of typing this person, deduplicated.
    pub fn typed(&self) -> Vec<Typed> {
        let mut out = BTreeSet::new();
        let mut add = |mode: Mode, text: String, how: &'static str| {
            out.insert(Typed { mode, text, how });
        };
        match &self.kind {
            Kind::Latin { first, last } => {
                add(Mode::Exact, format!("{first} {last}"), "as written");
                add(
                    Mode::Exact,
                    format!("{first} {last}").to_lowercase(),
                    "lowercase",
                );
                add(
                    Mode::Exact,
                    format!("{first} {last}").to_uppercase(),
                    "uppercase",
                );
                add(Mode::Exact, format!("  {first}   {last} "), "extra spaces");
                add(Mode::Prefix, first.to_lowercase(), "first name prefix");
            }
            Kind::Chinese {
                simplified,
                traditional,
                surname_chars,
                readings,
            } => {
                let chars: Vec<char> = simplified.chars().collect();
                let surname: String = chars[..*surname_chars].iter().collect();
                let given: String = chars[*surname_chars..].iter().collect();
                add(Mode::Exact, simplified.clone(), "characters");
                add(Mode::Exact, traditional.clone(), "traditional");
                add(
                    Mode::Exact,
                    format!("{surname} {given}"),
                    "space after surname",
                );
                let spaced: Vec<String> = chars.iter().map(char::to_string).collect();
                add(
                    Mode::Exact,
                    spaced.join(" "),
                    "space between every character",
                );
                let trad_chars: Vec<String> = traditional.chars().map(|c| c.to_string()).collect();
                add(Mode::Exact, trad_chars.join(" "), "traditional, spaced");
                add(Mode::Prefix, surname.clone(), "surname characters");

                let plains: Vec<&str> = readings.iter().map(|r| plain(r)).collect();
                let surname_py: String = plains[..*surname_chars].concat();
                let given_py: String = plains[*surname_chars..].concat();
                let full = plains.concat();
                let v = full.replace('ü', "v");
                add(Mode::Pinyin, v.clone(), "full pinyin");
                add(Mode::Pinyin, v.to_uppercase(), "full pinyin, uppercase");
                add(
                    Mode::Pinyin,
                    format!(
                        "{} {}",
                        capitalised(&surname_py.replace('ü', "v")),
                        capitalised(&given_py.replace('ü', "v"))
                    ),
                    "full pinyin, surname and given name capitalised and spaced",
                );
                add(
                    Mode::Pinyin,
                    plains.join(" ").replace('ü', "v"),
                    "full pinyin, spaced syllables",
                );
                let marked: Vec<String> = readings.iter().map(|r| with_tone_mark(r)).collect();
                add(Mode::Pinyin, marked.concat(), "tone marks");
                add(Mode::Pinyin, marked.join(" "), "tone marks, spaced");
                add(
                    Mode::Pinyin,
                    readings.concat().replace('ü', "v"),
                    "tone numbers",
                );
                if full.contains('ü') {
                    add(Mode::Pinyin, full.clone(), "ü");
                    add(Mode::Pinyin, full.replace('ü', "u:"), "u:");
                    add(Mode::Pinyin, full.replace('ü', "u"), "plain u after l or n");
                }
                let initials: String = plains.iter().filter_map(|p| p.chars().next()).collect();
                add(Mode::Pinyin, initials.clone(), "initials");
                add(Mode::Pinyin, initials.to_uppercase(), "initials, uppercase");
                add(
                    Mode::PinyinPrefix,
                    surname_py.replace('ü', "v"),
                    "pinyin prefix: surname",
                );
                let mut given_start = given_py.chars();
                let one: String = given_start.by_ref().take(1).collect();
                let two: String = one.chars().chain(given_start.take(1)).collect();
                add(
                    Mode::PinyinPrefix,
                    format!("{surname_py}{one}").replace('ü', "v"),
                    "pinyin prefix: surname and a letter",
                );
                add(
                    Mode::PinyinPrefix,
                    format!("{surname_py}{two}").replace('ü', "v"),
                    "pinyin prefix: surname and two letters",
                );
                add(
                    Mode::PinyinPrefix,
                    surname_py.replace('ü', "u"),
                    "pinyin prefix: surname, plain u",
                );
            }
        }
        out.into_iter().collect()
    }

    /// Whether this person is a right answer to `typed` (which may have been made from another
    /// person): the oracle of the precision check.
    pub fn answers(&self, typed: &Typed) -> bool {
        match (&self.kind, typed.mode) {
            (Kind::Latin { first, last }, Mode::Exact) => {
                words(&typed.text) == words(&format!("{first} {last}"))
            }
            (Kind::Latin { first, last }, Mode::Prefix) => format!("{first} {last}")
                .to_lowercase()
                .starts_with(&typed.text.to_lowercase()),
            (Kind::Latin { .. }, Mode::Pinyin | Mode::PinyinPrefix) => false,
            (Kind::Chinese { simplified, .. }, Mode::Exact) => simplified == &folded(&typed.text),
            (Kind::Chinese { simplified, .. }, Mode::Prefix) => {
                simplified.starts_with(&folded(&typed.text))
            }
            (
                Kind::Chinese {
                    simplified,
                    surname_chars,
                    readings,
                    ..
                },
                mode @ (Mode::Pinyin | Mode::PinyinPrefix),
            ) => {
                let Some(typed) = canonical_pinyin(&typed.text) else {
                    return false;
                };
                let surname: String = simplified.chars().take(*surname_chars).collect();
                let fixed = POLYPHONIC_SURNAMES.contains(&surname.as_str());
                // Every combination of the characters' readings.
                let mut combos: Vec<Vec<String>> = vec![Vec::new()];
                for (i, (c, reading)) in simplified.chars().zip(readings).enumerate() {
                    let mut choices = if i < *surname_chars && fixed {
                        Vec::new()
                    } else {
                        data_readings(c)
                    };
                    if choices.is_empty() {
                        choices.push(plain(reading).to_string());
                    }
                    combos = combos
                        .iter()
                        .flat_map(|combo| {
                            choices.iter().map(move |choice| {
                                let mut next = combo.clone();
                                next.push(choice.clone());
                                next
                            })
                        })
                        .collect();
                }
                combos.iter().any(|combo| {
                    // A ü reading is spelled with ü and with a plain u.
                    let full = combo.concat();
                    let full_u = full.replace('ü', "u");
                    let initials: String = combo.iter().filter_map(|p| p.chars().next()).collect();
                    if mode == Mode::Pinyin {
                        initials == typed || full == typed || full_u == typed
                    } else {
                        full.starts_with(&typed) || full_u.starts_with(&typed)
                    }
                })
            }
        }
    }
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_lowercase).collect()
}

/// The simplified, unspaced form of a typed Chinese name, by this set's own tables.
fn folded(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().filter(|c| !c.is_whitespace()) {
        let simple = SURNAMES
            .iter()
            .find_map(|(s, t, _)| {
                t.chars()
                    .position(|tc| tc == c)
                    .and_then(|at| s.chars().nth(at))
            })
            .or_else(|| GIVEN.iter().find(|(_, t, _)| *t == c).map(|(s, _, _)| *s))
            .unwrap_or(c);
        out.push(simple);
    }
    out
}

/// A typed pinyin form as this set spells readings: lowercase, ü, no tones or spaces.
fn canonical_pinyin(text: &str) -> Option<String> {
    let marks: &[(char, char)] = &[
        ('ā', 'a'),
        ('á', 'a'),
        ('ǎ', 'a'),
        ('à', 'a'),
        ('ē', 'e'),
        ('é', 'e'),
        ('ě', 'e'),
        ('è', 'e'),
        ('ī', 'i'),
        ('í', 'i'),
        ('ǐ', 'i'),
        ('ì', 'i'),
        ('ō', 'o'),
        ('ó', 'o'),
        ('ǒ', 'o'),
        ('ò', 'o'),
        ('ū', 'u'),
        ('ú', 'u'),
        ('ǔ', 'u'),
        ('ù', 'u'),
        ('ǖ', 'ü'),
        ('ǘ', 'ü'),
        ('ǚ', 'ü'),
        ('ǜ', 'ü'),
    ];
    let lower = text.to_lowercase().replace("u:", "ü").replace('v', "ü");
    let mut out = String::new();
    for c in lower.chars() {
        match c {
            'a'..='z' | 'ü' => out.push(c),
            '1'..='5' | ' ' => {}
            c => out.push(marks.iter().find(|(m, _)| *m == c)?.1),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The plain readings the pinyin data gives a character, first (most common) first.
fn data_readings(c: char) -> Vec<String> {
    use pinyin::ToPinyinMulti;
    let mut out: Vec<String> = Vec::new();
    if let Some(multi) = c.to_pinyin_multi() {
        for reading in multi {
            let plain = reading.plain().to_string();
            if !out.contains(&plain) {
                out.push(plain);
            }
        }
    }
    out
}

/// The self-check of the set's tables against the pinyin data: every given-name character and
/// every surname character is typed with the data's first reading, unless it is a surname the
/// index must read as one ([`POLYPHONIC_SURNAMES`]), whose typed reading is one of the data's.
/// Returns what is wrong, one line each.
pub fn check_readings() -> Vec<String> {
    let mut wrong = Vec::new();
    for (c, _, reading) in GIVEN {
        let found = data_readings(*c);
        if found.first().map(String::as_str) != Some(plain(reading)) {
            wrong.push(format!(
                "given {c}: pinyin data has {found:?}, the set says {reading}"
            ));
        }
    }
    for (surname, _, readings) in SURNAMES {
        let polyphonic = POLYPHONIC_SURNAMES.contains(surname);
        for (c, reading) in surname.chars().zip(readings.iter()) {
            let found = data_readings(c);
            let typed = plain(reading).to_string();
            let right = if polyphonic {
                found.contains(&typed)
            } else {
                found.first() == Some(&typed)
            };
            if !right {
                wrong.push(format!(
                    "surname {c}: pinyin data has {found:?}, the set says {reading}"
                ));
            }
        }
    }
    wrong
}
