//! Unit tests of the people generator: determinism, unique and valid phones and idcards, and
//! name distributions close to the real ones.

use super::*;
use std::collections::{HashMap, HashSet};

const N: usize = 100_000;

fn people() -> &'static [Person] {
    static P: std::sync::OnceLock<Vec<Person>> = std::sync::OnceLock::new();
    P.get_or_init(|| generate(N, 20240601))
}

fn is_latin(name: &str) -> bool {
    name.is_ascii()
}

#[test]
fn deterministic_for_a_seed() {
    let a = generate(2_000, 7);
    let b = generate(2_000, 7);
    assert_eq!(a, b);
    let c = generate(2_000, 8);
    assert_ne!(a, c);
    // uids do not depend on the seed, everything else does.
    assert_eq!(a[0].uid, c[0].uid);
    assert!(a.iter().zip(&c).filter(|(x, y)| x.phone == y.phone).count() < 5);
    // The iterator and generate agree, and generate(n) is a prefix of generate(m > n).
    let it: Vec<Person> = PeopleGen::new(7).take(500).collect();
    assert_eq!(&a[..500], &it[..]);
}

#[test]
fn new_contacts_take_phones_nobody_loaded_has() {
    let loaded = generate(2_000, 7);
    let phones: HashSet<&str> = loaded.iter().map(|p| p.phone.as_str()).collect();
    let mut fresh = PeopleGen::new(7);
    let mut new_phones = HashSet::new();
    for j in 0..500 {
        let (phone, name) = fresh.new_contact(2_000 + j);
        assert_eq!(phone.len(), 11);
        assert!(!phones.contains(phone.as_str()), "{j}");
        assert!(!name.is_empty());
        new_phones.insert(phone);
    }
    assert_eq!(new_phones.len(), 500);
    assert_eq!(uid_of(0), loaded[0].uid);
    assert_eq!(uid_of(1_999), loaded[1_999].uid);
}

#[test]
fn uids_sequential() {
    let p = people();
    assert_eq!(p[0].uid, "u00000001");
    assert_eq!(p[1].uid, "u00000002");
    assert_eq!(p[N - 1].uid, format!("u{N:08}"));
    assert!(p.iter().all(|x| x.uid.len() == 9));
}

#[test]
fn unique_uids_phones_idcards() {
    let p = people();
    let uids: HashSet<&str> = p.iter().map(|x| x.uid.as_str()).collect();
    let phones: HashSet<&str> = p.iter().map(|x| x.phone.as_str()).collect();
    let ids: HashSet<&str> = p.iter().map(|x| x.idcard.as_str()).collect();
    assert_eq!(uids.len(), N);
    assert_eq!(phones.len(), N);
    assert_eq!(ids.len(), N);
}

#[test]
fn phones_are_valid_mobiles() {
    let prefixes: HashSet<&str> = PHONE_PREFIXES.iter().copied().collect();
    let mut seen_prefixes = HashSet::new();
    for p in people() {
        assert_eq!(p.phone.len(), 11, "{}", p.phone);
        assert!(p.phone.bytes().all(|b| b.is_ascii_digit()), "{}", p.phone);
        assert!(prefixes.contains(&p.phone[..3]), "{}", p.phone);
        seen_prefixes.insert(&p.phone[..3]);
    }
    assert_eq!(seen_prefixes.len(), PHONE_PREFIXES.len());
}

#[test]
fn check_digit_known_vectors() {
    // Widely published valid examples.
    for id in [
        "11010519491231002X",
        "440524188001010014",
        "110101199003074477",
    ] {
        let b = id.as_bytes();
        assert_eq!(idcard_check_char(&b[..17]), b[17], "{id}");
    }
    assert_eq!(idcard_check_char(b"11010519491231002"), b'X');
}

#[test]
fn idcards_valid_dates_regions_check_digits() {
    let regions: HashMap<&str, &str> = REGIONS.iter().copied().collect();
    let (mut male, mut female) = (0, 0);
    let mut years = HashSet::new();
    for p in people() {
        let id = p.idcard.as_bytes();
        assert_eq!(id.len(), 18);
        assert!(id[..17].iter().all(u8::is_ascii_digit), "{}", p.idcard);
        assert_eq!(idcard_check_char(&id[..17]), id[17], "{}", p.idcard);
        assert_eq!(
            regions.get(&p.idcard[..6]),
            Some(&p.city.as_str()),
            "{}",
            p.idcard
        );
        let y: i32 = p.idcard[6..10].parse().unwrap();
        let m: u32 = p.idcard[10..12].parse().unwrap();
        let d: u32 = p.idcard[12..14].parse().unwrap();
        assert!(
            (BIRTH_FIRST_YEAR..=BIRTH_LAST_YEAR).contains(&y),
            "{}",
            p.idcard
        );
        // Round-trips through the calendar: a real date (no 02-30, leap days only in leap years).
        assert_eq!(
            civil_from_days(days_from_civil(y, m, d)),
            (y, m, d),
            "{}",
            p.idcard
        );
        assert!(
            (1..=12).contains(&m) && (1..=31).contains(&d),
            "{}",
            p.idcard
        );
        years.insert(y);
        let seq: u32 = p.idcard[14..17].parse().unwrap();
        assert!(seq >= 1);
        if seq % 2 == 1 { male += 1 } else { female += 1 }
    }
    assert_eq!(
        years.len(),
        (BIRTH_LAST_YEAR - BIRTH_FIRST_YEAR + 1) as usize
    );
    assert!(
        (male as f64 / N as f64 - 0.5).abs() < 0.02,
        "{male} / {female}"
    );
}

#[test]
fn calendar_helpers() {
    assert_eq!(days_from_civil(1970, 1, 1), 0);
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(civil_from_days(days_from_civil(2000, 2, 29)), (2000, 2, 29));
    assert_eq!(
        civil_from_days(days_from_civil(1900, 3, 1) - 1),
        (1900, 2, 28)
    );
    assert_eq!(birth_day_count(), 20_454);
}

#[test]
fn feistel_is_a_bijection() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for n in [2u64, 3, 10, 999, 1000, 4097] {
        let p = Perm::new(n, &mut rng);
        let out: HashSet<u64> = (0..n).map(|i| p.apply(i)).collect();
        assert_eq!(out.len() as u64, n);
        assert!(out.iter().all(|&x| x < n));
    }
}

#[test]
fn tables_have_no_duplicates() {
    let mut s = HashSet::new();
    for name in TOP_SURNAMES
        .iter()
        .chain(RARE_SURNAMES)
        .map(|x| x.0)
        .chain(TAIL_SURNAMES.iter().copied())
    {
        assert!(s.insert(name), "duplicate surname {name}");
    }
    let mut g = HashSet::new();
    for c in GIVEN_MALE.iter().chain(GIVEN_FEMALE).chain(GIVEN_NEUTRAL) {
        assert!(g.insert(*c), "duplicate given-name char {c}");
    }
    assert!((140..=170).contains(&g.len()), "{}", g.len());
    assert!(TOP_SURNAMES.len() >= 100);
    let per_tail = tail_weight() / TAIL_SURNAMES.len() as u32;
    assert!(
        per_tail <= TOP_SURNAMES.last().unwrap().1,
        "tail surnames outweigh the top 100"
    );
    let r: HashSet<&str> = REGIONS.iter().map(|x| x.0).collect();
    assert_eq!(r.len(), REGIONS.len());
    let tail = tail_weight();
    assert!((12_000..=20_000).contains(&tail), "tail weight {tail}");
    let g = PeopleGen::new(3);
    assert_eq!(g.pool_male.len() + g.pool_female.len(), 200);
    let all: HashSet<&String> = g.pool_male.iter().chain(&g.pool_female).collect();
    assert!(all.len() >= 195, "pool mostly distinct: {}", all.len());
}

#[test]
fn surname_distribution_roughly_real() {
    let p = people();
    let count = |s: &str| p.iter().filter(|x| x.name.starts_with(s)).count();
    let (w, l, z) = (count("王"), count("李"), count("张"));
    let share = (w + l + z) as f64 / N as f64;
    assert!((0.17..=0.24).contains(&share), "王+李+张 = {share}");
    for (s, c) in [("王", w), ("李", l), ("张", z)] {
        let f = c as f64 / N as f64;
        assert!((0.05..=0.09).contains(&f), "{s} = {f}");
    }
    assert!(count("刘") > count("黄") && count("黄") > count("孔"));
    for s in ["欧阳", "单", "翟", "曾", "解", "区", "朴", "查", "仇", "乐"] {
        assert!(count(s) > 0, "surname {s} missing");
    }
}

#[test]
fn shared_names_present() {
    let p = people();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for x in p {
        *counts.entry(x.name.as_str()).or_default() += 1;
    }
    assert!(counts.get("张三").copied().unwrap_or(0) >= 2);
    assert!(counts.get("李四").copied().unwrap_or(0) >= 2);
    let names_with_10 = counts.values().filter(|&&c| c >= 10).count();
    assert!(names_with_10 >= 150, "{names_with_10}");
    // Even a tiny demo has both.
    let small = generate(20, 99);
    assert!(small.iter().any(|x| x.name == "张三") && small.iter().any(|x| x.name == "李四"));
}

#[test]
fn latin_share_about_three_percent() {
    let latin = people().iter().filter(|x| is_latin(&x.name)).count();
    let f = latin as f64 / N as f64;
    assert!((0.025..=0.035).contains(&f), "latin share {f}");
    assert!(
        people()
            .iter()
            .filter(|x| is_latin(&x.name))
            .all(|x| x.name.contains(' '))
    );
}

#[test]
fn idcards_agree_with_schema_normaliser() {
    use hbidx_schema::normalize::normalize_idcard;
    for p in people().iter().take(5_000) {
        let ok = normalize_idcard(&p.idcard).ok();
        assert_eq!(
            ok.as_deref(),
            Some(p.idcard.as_str()),
            "{} rejected",
            p.idcard
        );
        // A wrong check character must be rejected.
        let mut bad = p.idcard.clone().into_bytes();
        bad[17] = if bad[17] == b'0' { b'1' } else { b'0' };
        let bad = String::from_utf8(bad).unwrap();
        assert!(normalize_idcard(&bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn starting_at_continues_uids_idcards_and_phone_suffixes_without_generating() {
    let skipped: Vec<Person> = PeopleGen::new(11).skip(1_000).take(50).collect();
    let started: Vec<Person> = PeopleGen::starting_at(11, 1_000).take(50).collect();
    for (a, b) in skipped.iter().zip(&started) {
        assert_eq!(a.uid, b.uid);
        // A phone's prefix is drawn, its 8 digits after it are the person's own.
        assert_eq!(a.phone[3..], b.phone[3..]);
        assert_eq!(a.idcard, b.idcard);
        assert!(!b.name.is_empty());
    }
    assert_eq!(started.len(), 50);
}
