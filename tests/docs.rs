//! The Markdown docs hold together: every relative link in README.md, ARCHITECTURE.md and docs/
//! points at a file that exists (and at a heading that exists, when it names one), every path
//! ARCHITECTURE.md names exists, every page of docs/ is in the book's table of contents
//! (docs/SUMMARY.md), and the README stays a short front page that starts with the two commands
//! CI and newcomers run.
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

/// A character of a path token, or of what is read whole to be refused as one (`{key}`,
/// `<topic>`, `kafka:`, `*`).
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./#:{}<>*~".contains(c)
}

/// `name.ext` with a short lowercase extension (`main.rs`, `README.md`,
/// `docker-compose.cluster.yml`), not a version or a number (`1.x`, `0.5`).
fn is_file_name(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    stem.chars().any(|c| c.is_ascii_alphabetic())
        && (2..=5).contains(&ext.len())
        && ext.starts_with(|c: char| c.is_ascii_lowercase())
        && ext
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// `token` (a run of [`is_path_char`]s) as a path, without a `#fragment` and the sentence's
/// full stop: `dir/file.ext` or a directory `dir/` (`ops/` too). `None` for everything else
/// that has a slash: URLs, routes (`/v1/…`, `…/rows/{key}`), templates (`kafka:<topic>/<p>`),
/// globs, and words like `new/hash` or `1.x/2.x`.
fn path_token(token: &str) -> Option<&str> {
    let token = token.trim_end_matches(['.', ':']);
    let token = token.split_once('#').map_or(token, |(path, _)| path);
    if token.starts_with('/') || token.contains(|c| ":{}<>*~".contains(c)) {
        return None;
    }
    let last = token.trim_end_matches('/').rsplit('/').next()?;
    let is_dir = token.ends_with('/') && !last.is_empty() && !last.starts_with('.');
    (is_dir || (token.contains('/') && is_file_name(last))).then_some(token)
}

/// The paths ARCHITECTURE.md names, with their line numbers, relative to the repo root: every
/// `dir/file.ext` and `dir/` it writes, in prose, backticks, table cells and code blocks. Bare
/// names count where the page says which directory they are in: in the parentheses right
/// after a directory (`store/src/hbase/ (pool.rs, call.rs)`), and on a crate's lines of the
/// crate table, where they are in that crate's `src/` (`query/ hbidx-query … (auth.rs)`, the
/// binary's `src/ hbidx (binary) … (main.rs)`). A bare name anywhere else (`lib.rs`, any crate's)
/// is not a path.
fn architecture_paths(text: &str) -> Vec<(usize, String)> {
    let mut paths = Vec::new();
    let mut in_fence = false;
    // Inside the crate table: the `src/` the current crate's bare names are in.
    let mut crate_src: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            crate_src = None;
            continue;
        }
        let mut tokens: Vec<(usize, &str)> = Vec::new();
        let mut start = None;
        for (at, c) in line.char_indices().chain([(line.len(), ' ')]) {
            match (start, is_path_char(c)) {
                (None, true) => start = Some(at),
                (Some(from), false) => {
                    tokens.push((from, &line[from..at]));
                    start = None;
                }
                _ => {}
            }
        }
        if !in_fence {
            crate_src = None;
        } else if !line.starts_with(char::is_whitespace) {
            // `query/     hbidx-query     …`: a crate's first line; `tests/    …` ends it.
            crate_src = match tokens.as_slice() {
                [(_, dir), (_, name), ..] if dir.ends_with('/') && name.starts_with("hbidx") => {
                    Some(if *name == "hbidx" {
                        dir.to_string()
                    } else {
                        format!("{dir}src/")
                    })
                }
                _ => None,
            };
        }
        // Bare names in the parentheses after a directory are in that directory.
        let mut in_parens_of: Vec<(std::ops::Range<usize>, String)> = Vec::new();
        for &(at, token) in &tokens {
            let Some(dir) = path_token(token).filter(|path| path.ends_with('/')) else {
                continue;
            };
            let rest = &line[at + token.len()..];
            if let Some(inside) = rest.trim_start().strip_prefix('(') {
                let open = line.len() - inside.len();
                let close = inside.find(')').map_or(line.len(), |end| open + end);
                in_parens_of.push((open..close, dir.to_string()));
            }
        }
        for (position, &(at, token)) in tokens.iter().enumerate() {
            let name = token.trim_end_matches(['.', ':']);
            if name.trim_end_matches('/').contains('/') {
                paths.extend(path_token(token).map(|path| (number, path.to_string())));
                continue;
            }
            let file = is_file_name(name);
            let in_dir = in_parens_of.iter().find(|(span, _)| span.contains(&at));
            if let Some((_, dir)) = in_dir
                && file
            {
                paths.push((number, format!("{dir}{name}")));
            } else if let Some(src) = &crate_src
                && position > 0
                && (file || path_token(name).is_some())
            {
                paths.push((number, format!("{src}{name}")));
            } else if crate_src.is_none() || position == 0 {
                // A bare directory (`fuzz/`) is at the root; a bare file name says too little.
                paths.extend(
                    path_token(name)
                        .filter(|path| path.ends_with('/'))
                        .map(|path| (number, path.to_string())),
                );
            }
        }
    }
    paths
}

/// ARCHITECTURE.md promises a concept in one hop: every path it names must exist (a directory
/// where it writes `dir/`).
#[test]
fn every_path_architecture_names_exists() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let paths = architecture_paths(&text);
    let missing: Vec<String> = paths
        .iter()
        .filter(|(_, path)| {
            let resolved = normalise(&root.join(path));
            !resolved.starts_with(&root)
                || if path.ends_with('/') {
                    !resolved.is_dir()
                } else {
                    !resolved.exists()
                }
        })
        .map(|(line, path)| format!("ARCHITECTURE.md:{line}: {path}"))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist:\n  {}",
        missing.join("\n  ")
    );
    assert!(
        paths.len() > 100,
        "only {} paths found in ARCHITECTURE.md: is the parser blind?",
        paths.len()
    );
}

#[test]
fn the_architecture_path_parser_reads_what_the_page_writes() {
    let text = "\
```
query/     hbidx-query     the service (auth.rs); the dashboard (ops/)
                           metrics (telemetry.rs).
src/       hbidx (binary)  the CLI (main.rs)
tests/                     end-to-end tests on 127.0.0.1:0 (util.rs)
PUT /v1/tables/user/rows/{key}      (query/src/write.rs)
```
| concept | store/src/hbase/ (pool.rs, call.rs), docs/guide/kafka.md#sources, `deploy/k8s/`, deploy/docker-compose.cluster.yml |
See https://example.invalid/a/b.md, `kafka:<topic>/<p>`, GET …/rows/{key}, `keys new/hash`,
HBase 1.x/2.x, `lib.rs`, fuzz/ and [design](docs/design/README.md).
";
    let paths: Vec<(usize, String)> = architecture_paths(text);
    let expected = [
        (2, "query/"),
        (2, "query/src/auth.rs"),
        (2, "query/src/ops/"),
        (3, "query/src/telemetry.rs"),
        (4, "src/"),
        (4, "src/main.rs"),
        (5, "tests/"),
        (6, "query/src/write.rs"),
        (8, "store/src/hbase/"),
        (8, "store/src/hbase/pool.rs"),
        (8, "store/src/hbase/call.rs"),
        (8, "docs/guide/kafka.md"),
        (8, "deploy/k8s/"),
        (8, "deploy/docker-compose.cluster.yml"),
        (10, "fuzz/"),
        (10, "docs/design/README.md"),
    ]
    .map(|(line, path)| (line, path.to_string()));
    assert_eq!(paths, expected);
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

/// scripts/scale.sh checks the free disk before it builds anything, at 1,600 bytes a row with
/// Kafka (its part fills a second data dir) and 600 without: a table no disk holds is refused
/// with the estimate it used.
#[test]
fn the_scale_script_sizes_its_disk_check_by_whether_kafka_runs() {
    for (kafka, bytes) in [("", "600"), ("127.0.0.1:1", "1600")] {
        let out = std::process::Command::new("bash")
            .arg("scripts/scale.sh")
            .current_dir(root())
            .env("SCALE_KAFKA", kafka)
            .env("SCALE_MID", "")
            .env("SCALE_ROWS", "1000000000000000")
            .env("SCALE_DIR", std::env::temp_dir())
            .output()
            .expect("running bash scripts/scale.sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let with_kafka = !kafka.is_empty();
        assert!(!out.status.success(), "SCALE_KAFKA={kafka:?}: {stderr}");
        assert!(
            stderr.contains(&format!("({bytes} bytes/row:"))
                && stderr.contains("not enough free disk")
                && stderr.contains("Kafka part's data dir") == with_kafka,
            "SCALE_KAFKA={kafka:?}: {stderr}"
        );
    }
}
