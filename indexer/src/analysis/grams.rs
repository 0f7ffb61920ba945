//! Character n-grams of a name, for partial (substring) lookups: the index holds every 1-gram
//! and 2-gram of each word (`__gram`); a partial lookup of n ≥ 2 characters needs all of its
//! bigrams, and the fetched row is re-checked for the real substring.

/// 1-grams and 2-grams over the characters of each whitespace-separated word.
pub(super) fn grams(normalized: &str) -> Vec<String> {
    // Slices of the name, sorted and deduplicated before anything is copied.
    let mut slices: Vec<&str> = Vec::new();
    for word in normalized.split(' ') {
        let mut starts = word.char_indices().map(|(i, _)| i).peekable();
        while let Some(start) = starts.next() {
            let second = starts.peek().copied().unwrap_or(word.len());
            slices.push(&word[start..second]);
            if second < word.len() {
                let end = word[second..]
                    .chars()
                    .next()
                    .map_or(word.len(), |c| second + c.len_utf8());
                slices.push(&word[start..end]);
            }
        }
    }
    slices.sort_unstable();
    slices.dedup();
    slices.into_iter().map(str::to_owned).collect()
}

/// The bigrams a partial query must all hit (or its only character).
pub(super) fn query_grams(normalized: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in normalized.split(' ') {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() == 1 {
            out.push(word.to_string());
        }
        for pair in chars.windows(2) {
            out.push(pair.iter().collect());
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward version the optimised [`grams`] replaced; the tests below pin that
    /// both give exactly the same terms.
    fn reference_grams(normalized: &str) -> Vec<String> {
        let mut out = Vec::new();
        for word in normalized.split(' ') {
            let chars: Vec<char> = word.chars().collect();
            for (i, c) in chars.iter().enumerate() {
                out.push(c.to_string());
                if let Some(next) = chars.get(i + 1) {
                    out.push([*c, *next].iter().collect());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn grams_match_the_reference_on_examples() {
        for name in [
            "张三",
            "曾小贤",
            "欧阳修",
            "张三丰",
            "张 john",
            "李a明",
            "王é",
            "john smith",
            "a",
            "中",
        ] {
            assert_eq!(grams(name), reference_grams(name), "{name}");
        }
    }

    proptest::proptest! {
        #[test]
        fn grams_match_the_reference(name in "[张三李四行长重乐会朝传觉和ab1é ]{0,9}") {
            proptest::prop_assert_eq!(grams(&name), reference_grams(&name));
        }
    }

    #[test]
    fn partial_grams_cover_substrings() {
        let grams = grams("张三丰");
        for gram in query_grams("三丰") {
            assert!(grams.contains(&gram));
        }
    }
}
