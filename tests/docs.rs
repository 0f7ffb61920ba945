//! The Markdown docs hold together: every relative link in README.md, ARCHITECTURE.md and docs/
//! points at a file that exists (and at a heading that exists, when it names one), every page
//! of docs/ is in the book's table of contents (docs/SUMMARY.md), and the README stays a short
//! front page that starts with the two commands CI and newcomers run.
//!
//! Plain std on purpose: a link checker is a few dozen lines, and the docs must not pull a
//! Markdown parser into the build.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, ARCHITECTURE.md and every `.md` under docs/, sorted.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    walk(&root.join("docs"), &mut files);
    files.sort();
    files
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"]
            .into_iter()
            .find(|marker| trimmed.starts_with(marker));
        match (fence, marker) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (None, None) => out.push((index + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` without its inline code spans, which may hold `](` that is not a link.
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect()
}

/// Targets of inline links and images (`[text](target "title")`) and of reference definitions
/// (`[id]: target`), with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    for (number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some((label, rest)) = trimmed.split_once("]:")
            && !label.contains(']')
            && let Some(target) = rest.split_whitespace().next()
        {
            targets.push((number, target.to_owned()));
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let inside = rest[..end].trim();
            let target = inside
                .strip_prefix('<')
                .and_then(|t| t.split_once('>').map(|(t, _)| t))
                .unwrap_or_else(|| inside.split_whitespace().next().unwrap_or(""));
            targets.push((number, target.to_owned()));
            rest = &rest[end..];
        }
    }
    targets
}

/// The anchor a heading gets on GitHub (and, for the headings used here, in mdBook):
/// lowercased, spaces to `-`, everything but letters, digits, `-` and `_` dropped; a repeated
/// heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let mut slug = String::new();
        for c in heading.trim().chars() {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                slug.extend(c.to_lowercase());
            } else if c == ' ' {
                slug.push('-');
            }
        }
        let count = seen.entry(slug.clone()).or_insert(0);
        let anchor = if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        };
        *count += 1;
        out.insert(anchor);
    }
    out
}

/// `path` with `.` and `..` resolved lexically (the file may not exist).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn relative_links_point_at_existing_files_and_headings() {
    let root = root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line, target) in link_targets(&text) {
            if target.is_empty()
                || target.contains("://")
                || target.starts_with("mailto:")
                || target.starts_with('/')
            {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                normalise(&file.parent().unwrap().join(path))
            };
            if !resolved.starts_with(&root) || !resolved.exists() {
                broken.push(format!("{shown}:{line}: {target} (no such file)"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if resolved.extension().is_some_and(|ext| ext == "md") {
                let target_text = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&target_text).contains(fragment) {
                    broken.push(format!("{shown}:{line}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
    assert!(
        checked > 50,
        "only {checked} links found: is the parser blind?"
    );
}

#[test]
fn every_docs_page_is_in_the_summary() {
    let root = root();
    let summary_path = root.join("docs/SUMMARY.md");
    let summary = std::fs::read_to_string(&summary_path).unwrap();
    let listed: BTreeSet<PathBuf> = link_targets(&summary)
        .into_iter()
        .map(|(_, target)| normalise(&root.join("docs").join(target)))
        .collect();
    let missing: Vec<String> = markdown_files()
        .into_iter()
        .filter(|file| file.starts_with(root.join("docs")) && *file != summary_path)
        .filter(|file| !listed.contains(file))
        .map(|file| file.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages missing from docs/SUMMARY.md: {missing:?}"
    );
}

/// The README is the front page: the two commands first (CI runs the second verbatim), the
/// rest in docs/.
#[test]
fn readme_is_short_and_starts_with_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.len() <= 12 * 1024,
        "README.md is {} bytes; keep it under 12 KiB and move detail into docs/",
        readme.len()
    );
    let first_block = readme
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("README.md has no sh block");
    let commands: Vec<&str> = first_block
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .collect();
    assert_eq!(
        commands,
        ["cargo run --release -- demo", "bash scripts/test.sh"],
        "README.md must start with the demo and the test command"
    );
}

#[test]
fn the_link_parser_reads_what_the_docs_write() {
    let text = "# Top heading\n\nSee [a](a.md), ![img](../b.png \"title\") and `[not](c.md)`.\n\
                ```\n[not](d.md)\n```\n[id]: e.md#top-heading\n## Two `words` here\n";
    let targets: Vec<String> = link_targets(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["a.md", "../b.png", "e.md#top-heading"]);
    let anchors = anchors(text);
    assert!(anchors.contains("top-heading"), "{anchors:?}");
    assert!(anchors.contains("two-words-here"), "{anchors:?}");
}

/// The scale benchmark's table (docs/benchmarks.md#scale) comes from scripts/scale_table.py:
/// its self-test lines runs of different sizes up by measure.
#[test]
fn the_scale_table_script_passes_its_self_test() {
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/scale_table.py"))
        .arg("--test")
        .output()
        .expect("running python3 scripts/scale_table.py --test");
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "scale_table.py --test: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
