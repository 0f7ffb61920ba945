//! `hbidx demo`: one command from nothing to a served, indexed table of generated people.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hbidx_schema::config::{HbidxConfig, TableConfig};
use hbidx_store::now_ms;
use indicatif::{ProgressBar, ProgressStyle};

use crate::people::{PeopleGen, Person};
use crate::table::{DEMO_SEED, PersonColumns, demo_table};

const LOADED_MARKER: &str = "demo-loaded.json";
const BATCH: usize = 1000;

/// Where and how the demo serves: `[server]` with the command line's overrides applied.
pub struct Serving {
    pub listen: SocketAddr,
    pub gateway: Option<hbidx_gateway::GatewayOptions>,
    pub http_threads: hbidx_serve::HttpThreads,
}

pub async fn run(
    config: HbidxConfig,
    serving: Serving,
    data_dir: PathBuf,
    rows: usize,
    no_serve: bool,
    api_key: Option<String>,
) -> Result<()> {
    let Serving {
        listen,
        gateway,
        http_threads,
    } = serving;
    // The demo always has a key to show in its examples: the one given, else a fresh one that
    // is printed (only the demo does this; `serve` never invents credentials).
    let (api_key, generated) = match api_key {
        Some(key) => (key, false),
        None => (hbidx_query::auth::generate_key(), true),
    };
    let security = hbidx_serve::security_config(&config, Some(&api_key), None)?;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let instance = hbidx_serve::open(
        &config,
        &data_dir,
        &Default::default(),
        hbidx_query::auth::Auth::new(&security),
    )?;
    let table = demo_table(&config)?.clone();
    let columns = PersonColumns::for_table(&table)?;
    let marker = data_dir.join(LOADED_MARKER);
    if marker.exists() {
        let existing = instance.embedded()?.count_rows(&table.name)?;
        eprintln!(
            "reusing {} ({} rows in table \"{}\"); nothing reloaded",
            data_dir.display(),
            existing,
            table.name
        );
    } else {
        load(&instance, &table, &columns, rows)?;
        std::fs::write(
            &marker,
            format!("{{\"rows\":{rows},\"seed\":{DEMO_SEED}}}\n"),
        )
        .with_context(|| format!("writing {}", marker.display()))?;
    }
    let started = Instant::now();
    instance.wait_caught_up(Duration::from_secs(600)).await?;
    let runtime_table = instance
        .state
        .tables
        .get(&table.name)
        .context("table runtime missing")?;
    let stats = runtime_table.searcher.stats();
    eprintln!(
        "index of \"{}\" is up to date ({} docs, {} segments, {:.1} MB; caught up in {:.1}s)",
        table.name,
        stats.docs,
        stats.segments,
        stats.bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let example = PeopleGen::new(DEMO_SEED)
        .next()
        .context("the demo generator produced nobody")?;
    let shown_key = generated.then_some(api_key.as_str());
    if no_serve {
        print_examples(listen, &table, &example, shown_key);
        instance.shutdown_indexers().await?;
        return Ok(());
    }
    let thrift = match gateway {
        Some(options) => {
            Some(hbidx_serve::start_gateway(&instance, &config, options)?.local_addr())
        }
        None => None,
    };
    let listener = hbidx_serve::bind(listen).await?;
    let bound = listener.local_addr()?;
    let http = instance.start_http(listener, &http_threads).await?;
    print_examples(bound, &table, &example, shown_key);
    if let Some(thrift) = thrift {
        print_thrift_example(thrift, &table);
    }
    eprintln!("listening on http://{bound} (Ctrl-C to stop)");
    instance.serve(http).await
}

fn load(
    instance: &hbidx_serve::Instance,
    table: &TableConfig,
    columns: &PersonColumns,
    rows: usize,
) -> Result<()> {
    let bar = ProgressBar::new(rows as u64);
    bar.set_style(
        ProgressStyle::with_template("loading {bar:40} {pos}/{len} rows  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let ts = now_ms();
    let mut batch = Vec::with_capacity(BATCH);
    for person in PeopleGen::new(DEMO_SEED).take(rows) {
        batch.push(columns.mutation(table, &person, ts)?);
        if batch.len() == BATCH {
            instance
                .embedded()?
                .mutate_sync(std::mem::take(&mut batch))?;
            bar.inc(BATCH as u64);
        }
    }
    if !batch.is_empty() {
        let n = batch.len() as u64;
        instance.embedded()?.mutate_sync(batch)?;
        bar.inc(n);
    }
    bar.finish();
    Ok(())
}

/// Prints curl commands that work against the demo. They read the key from `$HBIDX_API_KEY`;
/// `generated_key` is printed (to stdout, not the log) when the demo made one up.
fn print_examples(
    listen: SocketAddr,
    table: &TableConfig,
    person: &Person,
    generated_key: Option<&str>,
) {
    let base = format!("http://{listen}/v1/tables/{}", table.name);
    let tail = &person.phone[person.phone.len().saturating_sub(4)..];
    match generated_key {
        Some(key) => println!(
            "\nEvery route but the health checks, /dashboard and /openapi.json needs an API key. Generated one for this run \
             (choose your own with --api-key or HBIDX_API_KEY):\n\n  export HBIDX_API_KEY={key}"
        ),
        None => println!(
            "\nEvery route but the health checks, /dashboard and /openapi.json needs an API key; the examples use yours:\n\n  \
             export HBIDX_API_KEY=<the key you gave with --api-key>   # unless it is set already"
        ),
    }
    println!(
        "\nTry these (the first generated person is {} / uid {}):\n",
        person.name, person.uid
    );
    let curl = "curl -s -H \"authorization: Bearer $HBIDX_API_KEY\"";
    println!("  {curl} '{base}/rows?phone={}'", person.phone);
    println!("  {curl} '{base}/rows?idcard={}'", person.idcard);
    println!(
        "  {curl} '{base}/rows?name={}&limit=5'",
        urlencode(&person.name)
    );
    println!("  {curl} '{base}/rows?name=%E5%BC%A0&match=prefix&limit=5'");
    println!("  {curl} '{base}/rows?name=zhangsan&match=pinyin&limit=5'");
    println!("  {curl} '{base}/rows?phone_suffix={tail}&limit=5&columns=info:name,info:phone'");
    println!("  {curl} '{base}/rowkey?key={}'", person.uid);
    println!(
        "  {curl} -X PUT '{base}/rows/u99999999?wait=indexed' -H 'content-type: application/json' \\\n       -d '{{\"cells\":{{\"info:name\":\"张三\",\"info:phone\":\"13800138000\"}}}}'"
    );
    println!("  {curl} '{base}/rows?phone=13800138000'");
    println!(
        "  {curl} -X POST '{base}/rows:batch-lookup' -H 'content-type: application/json' \\\n       -d '{{\"field\":\"phone\",\"values\":[\"{}\",\"13800138000\"]}}'",
        person.phone
    );
    println!("  {curl} 'http://{listen}/v1/indexer/status'");
    println!("\nThe API's OpenAPI 3.1 document: http://{listen}/openapi.json\n");
}

fn print_thrift_example(thrift: SocketAddr, table: &TableConfig) {
    println!(
        "HBase Thrift gateway on {thrift} (happybase: pip install happybase==1.2.0):\n\n  \
         python3 -c \"import happybase; t = happybase.Connection('{}', {}).table('{}'); \
         print(next(t.scan(limit=1)))\"\n",
        thrift.ip(),
        thrift.port(),
        table.full_name()
    );
}

fn urlencode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
