//! Static checks of deploy/: there is no Docker engine or Kubernetes cluster here, so the
//! manifests are checked for what can be checked without one. Every YAML and JSON file parses;
//! compose and Kubernetes references (services, files, volumes, Secrets, named ports) resolve;
//! the probes hit /healthz and /readyz; every hbidx config they use passes the real binary's
//! `hbidx schema check`; and the sharded tier (compose and StatefulSet) runs every shard
//! replica of its config's `[cluster]` exactly once, at the address the config gives it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn deploy_files(extensions: &[&str]) -> Vec<PathBuf> {
    let mut all = Vec::new();
    files_under(Path::new("deploy"), &mut all);
    all.retain(|p| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e))
    });
    all.sort();
    all
}

fn load_yaml(path: &Path) -> Vec<Yaml> {
    let text = std::fs::read_to_string(path).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// `yaml` with YAML merge keys (`<<: *anchor`) applied, as compose applies them: yaml-rust2
/// resolves the aliases but keeps `<<` as an ordinary key. Keys written beside `<<` win.
fn resolve_merge_keys(yaml: &Yaml) -> Yaml {
    match yaml {
        Yaml::Hash(map) => {
            let merge_key = Yaml::String("<<".into());
            let mut out = yaml_rust2::yaml::Hash::new();
            for (key, value) in map {
                if *key != merge_key {
                    out.insert(key.clone(), resolve_merge_keys(value));
                }
            }
            let bases = match map.get(&merge_key) {
                Some(Yaml::Array(bases)) => bases.clone(),
                Some(base) => vec![base.clone()],
                None => Vec::new(),
            };
            for base in bases {
                let Yaml::Hash(base) = resolve_merge_keys(&base) else {
                    panic!("`<<` merges a mapping, got {base:?}");
                };
                for (key, value) in base {
                    out.entry(key).or_insert(value);
                }
            }
            Yaml::Hash(out)
        }
        Yaml::Array(items) => Yaml::Array(items.iter().map(resolve_merge_keys).collect()),
        other => other.clone(),
    }
}

/// A compose file, merge keys applied.
fn load_compose(path: &str) -> Yaml {
    resolve_merge_keys(&load_yaml(Path::new(path))[0])
}

fn compose_services(compose: &Yaml) -> BTreeMap<String, &Yaml> {
    compose["services"]
        .as_hash()
        .expect("services")
        .iter()
        .map(|(name, service)| (str_of(name, "service").to_string(), service))
        .collect()
}

fn str_of<'a>(yaml: &'a Yaml, what: &str) -> &'a str {
    yaml.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {yaml:?}"))
}

fn strings(yaml: &Yaml) -> Vec<String> {
    match yaml {
        Yaml::Array(items) => items
            .iter()
            .map(|item| match item {
                Yaml::String(s) => s.clone(),
                Yaml::Integer(i) => i.to_string(),
                other => panic!("expected a scalar, got {other:?}"),
            })
            .collect(),
        Yaml::String(s) => s.split_whitespace().map(str::to_string).collect(),
        Yaml::BadValue => Vec::new(),
        other => panic!("expected a list, got {other:?}"),
    }
}

fn keys_of(yaml: &Yaml) -> Vec<String> {
    match yaml {
        Yaml::Hash(map) => map.keys().map(|k| str_of(k, "key").to_string()).collect(),
        Yaml::Array(_) => strings(yaml),
        _ => Vec::new(),
    }
}

/// `hbidx schema check FILE` with the real binary; panics with its output unless it passes.
fn schema_check(path: &Path, origin: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(["schema", "check"])
        .arg(path)
        .output()
        .expect("hbidx runs");
    assert!(
        output.status.success(),
        "{origin}: hbidx schema check {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The value after `flag` in an argument list.
fn arg_after(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[test]
fn every_yaml_and_json_file_under_deploy_parses() {
    let yaml_files = deploy_files(&["yaml", "yml"]);
    assert!(
        yaml_files.len() >= 5,
        "compose, prometheus and the Kubernetes manifests: {yaml_files:?}"
    );
    for path in &yaml_files {
        let docs = load_yaml(path);
        assert!(!docs.is_empty(), "{}: no documents", path.display());
        for doc in &docs {
            assert!(
                matches!(doc, Yaml::Hash(_)),
                "{}: a document is not a mapping",
                path.display()
            );
            // YAML and JSON embedded in ConfigMaps/Secrets (scrape configs, dashboards) too.
            for section in ["data", "stringData"] {
                if let Yaml::Hash(entries) = &doc[section] {
                    for (name, value) in entries {
                        let name = str_of(name, "data key");
                        let value = str_of(value, name);
                        if name.ends_with(".yml") || name.ends_with(".yaml") {
                            YamlLoader::load_from_str(value).unwrap_or_else(|err| {
                                panic!("{}: {section}.{name}: {err}", path.display())
                            });
                        } else if name.ends_with(".json") {
                            serde_json::from_str::<serde_json::Value>(value).unwrap_or_else(
                                |err| panic!("{}: {section}.{name}: {err}", path.display()),
                            );
                        }
                    }
                }
            }
        }
    }
    for path in deploy_files(&["json"]) {
        let text = std::fs::read_to_string(&path).unwrap();
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    }
}

#[test]
fn every_config_under_deploy_config_passes_schema_check() {
    let configs = deploy_files(&["toml"]);
    assert!(configs.len() >= 3, "{configs:?}");
    for path in configs {
        schema_check(&path, "deploy/config");
    }
}

/// The source file a compose service mounts at `container_path`.
fn compose_mount(service: &Yaml, container_path: &str) -> Option<PathBuf> {
    strings(&service["volumes"]).into_iter().find_map(|volume| {
        let mut parts = volume.split(':');
        let (host, container) = (parts.next()?, parts.next()?);
        (container == container_path).then(|| Path::new("deploy").join(host))
    })
}

/// Every service's dependencies, build files, images, mounts, volumes and secrets resolve.
fn check_compose_references(compose: &Yaml, origin: &str) {
    let services = compose_services(compose);
    let named_volumes: BTreeSet<String> = keys_of(&compose["volumes"]).into_iter().collect();
    let secrets: BTreeSet<String> = keys_of(&compose["secrets"]).into_iter().collect();
    let built_images: BTreeSet<&str> = services
        .values()
        .filter(|s| !s["build"].is_badvalue())
        .filter_map(|s| s["image"].as_str())
        .collect();
    for (name, service) in &services {
        for dependency in keys_of(&service["depends_on"]) {
            assert!(
                services.contains_key(&dependency),
                "{origin}: {name} depends on unknown service {dependency}"
            );
        }
        match &service["build"] {
            Yaml::BadValue => {
                let image = str_of(&service["image"], "image");
                assert!(
                    built_images.contains(image)
                        || (image.contains(':') && !image.ends_with(":latest")),
                    "{origin}: {name}: image {image} is neither built here nor pinned to a tag"
                );
            }
            Yaml::String(context) => {
                assert!(
                    Path::new("deploy")
                        .join(context)
                        .join("Dockerfile")
                        .is_file(),
                    "{origin}: {name}: no Dockerfile in {context}"
                );
            }
            build => {
                let context = Path::new("deploy").join(str_of(&build["context"], "context"));
                let dockerfile = context.join(str_of(&build["dockerfile"], "dockerfile"));
                assert!(
                    dockerfile.is_file(),
                    "{origin}: {name}: {} missing",
                    dockerfile.display()
                );
            }
        }
        for volume in strings(&service["volumes"]) {
            let host = volume.split(':').next().unwrap();
            if host.starts_with('.') || host.starts_with('/') {
                assert!(
                    Path::new("deploy").join(host).exists(),
                    "{origin}: {name}: mounts {host}, which doesn't exist"
                );
            } else {
                assert!(
                    named_volumes.contains(host),
                    "{origin}: {name}: volume {host} isn't declared"
                );
            }
        }
        for secret in strings(&service["secrets"]) {
            assert!(
                secrets.contains(&secret),
                "{origin}: {name}: secret {secret} isn't declared"
            );
        }
    }
}

#[test]
fn compose_references_resolve_and_its_hbidx_config_passes() {
    let compose = load_compose("deploy/docker-compose.yml");
    let services = compose_services(&compose);
    for wanted in ["hbase", "hbase-thrift", "kafka", "kafka-proxy", "hbidx"] {
        assert!(services.contains_key(wanted), "no {wanted} service");
    }
    check_compose_references(&compose, "docker-compose.yml");

    // hbidx: the config it is told to read is a mounted file that passes schema check.
    let hbidx = services["hbidx"];
    let args = strings(&hbidx["command"]);
    assert_eq!(args.first().map(String::as_str), Some("serve"));
    let config_path = arg_after(&args, "--config").expect("hbidx gets --config");
    let host_config = compose_mount(hbidx, &config_path).expect("the config is mounted");
    let checked = schema_check(&host_config, "docker-compose.yml hbidx");
    assert!(checked.contains("1 Kafka source(s)"), "{checked}");
    // Its Thrift address is the compose Thrift server.
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(&host_config).unwrap()).unwrap();
    assert_eq!(config["store"]["kind"].as_str(), Some("hbase"));
    let thrift = config["store"]["thrift"].as_str().unwrap();
    assert_eq!(thrift, "hbase-thrift:9090");
    assert!(
        strings(&services["hbase-thrift"]["command"])
            .join(" ")
            .contains("thrift start -p 9090"),
        "the Thrift server listens where hbidx looks"
    );
    // The Kafka source reads the topic the proxy routes to, from the compose broker.
    let source = &config["sources"].as_array().unwrap()[0];
    assert_eq!(source["brokers"].as_str(), Some("kafka:9092"));
    assert_eq!(source["format"].as_str(), Some("hbase-kafka-proxy"));
    let rules = std::fs::read_to_string("deploy/hbase/kafka-route-rules.xml").unwrap();
    let topic = source["topic"].as_str().unwrap();
    assert!(
        rules.contains(&format!("table=\"default:user\" topic=\"{topic}\"")),
        "{rules}"
    );
    let proxy = strings(&services["kafka-proxy"]["command"]);
    assert_eq!(arg_after(&proxy, "-b").as_deref(), Some("kafka:9092"));
    // No key in the file; compose refuses to start without one.
    match &hbidx["environment"]["HBIDX_API_KEY"] {
        Yaml::String(value) => assert!(value.starts_with("${HBIDX_API_KEY:?"), "{value}"),
        other => panic!("HBIDX_API_KEY: {other:?}"),
    }

    // Prometheus scrapes /metrics with a bearer credential from a file.
    let prometheus = services["prometheus"];
    let mounted = compose_mount(prometheus, "/etc/prometheus/prometheus.yml").unwrap();
    check_scrape_config(&load_yaml(&mounted)[0], "deploy/prometheus/prometheus.yml");
}

/// The `[cluster]` of an hbidx config that passed `hbidx schema check`, through the library's
/// own parser: the layout the instances will run with.
fn cluster_of(text: &str, origin: &str) -> hbidx_schema::config::ClusterConfig {
    hbidx_schema::config::parse_config(text)
        .unwrap_or_else(|err| panic!("{origin}: {err}"))
        .cluster
        .unwrap_or_else(|| panic!("{origin}: no [cluster]"))
}

/// Every (shard, replica) of a layout, shard 0 first.
fn every_shard_replica(cluster: &hbidx_schema::config::ClusterConfig) -> BTreeSet<(usize, usize)> {
    cluster
        .shards
        .iter()
        .enumerate()
        .flat_map(|(shard, replicas)| (0..replicas.len()).map(move |replica| (shard, replica)))
        .collect()
}

/// The port of a `--listen` address.
fn listen_port(args: &[String], origin: &str) -> String {
    let listen = arg_after(args, "--listen").unwrap_or_else(|| panic!("{origin}: no --listen"));
    listen.rsplit(':').next().unwrap().to_string()
}

#[test]
fn compose_cluster_runs_every_shard_replica_once() {
    let path = "deploy/docker-compose.cluster.yml";
    let compose = load_compose(path);
    check_compose_references(&compose, path);
    let services = compose_services(&compose);

    // HBase, its Thrift server, Kafka and the proxy are the single-instance file's, unchanged.
    let single = load_compose("deploy/docker-compose.yml");
    let single_services = compose_services(&single);
    for name in [
        "kafka",
        "kafka-init",
        "hbase",
        "hbase-init",
        "hbase-thrift",
        "kafka-proxy",
    ] {
        assert_eq!(
            services.get(name),
            single_services.get(name),
            "{path}: service {name} differs from docker-compose.yml's"
        );
    }

    let instances: BTreeMap<&String, &&Yaml> = services
        .iter()
        .filter(|(_, service)| {
            strings(&service["command"]).first().map(String::as_str) == Some("serve")
        })
        .collect();
    assert!(instances.len() >= 2, "{path}: {instances:?}");
    let mut config_file = None;
    let mut identities = BTreeMap::new();
    let mut data_volumes = BTreeSet::new();
    for (name, service) in &instances {
        let args = strings(&service["command"]);
        let config_path = arg_after(&args, "--config").expect("--config");
        let host_config = compose_mount(service, &config_path).expect("the config is mounted");
        assert!(
            config_file.get_or_insert(host_config.clone()) == &host_config,
            "{path}: {name} reads another config than the other instances"
        );
        let data_dir = arg_after(&args, "--data-dir").expect("--data-dir");
        let volume = strings(&service["volumes"])
            .into_iter()
            .find_map(|v| v.strip_suffix(&format!(":{data_dir}")).map(str::to_string))
            .unwrap_or_else(|| panic!("{path}: {name}: {data_dir} is not a volume"));
        assert!(
            data_volumes.insert(volume.clone()),
            "{path}: {name} shares the data volume {volume}"
        );
        let env = |key: &str| -> usize {
            str_of(&service["environment"][key], key)
                .parse()
                .unwrap_or_else(|err| panic!("{path}: {name}: {key}: {err}"))
        };
        let identity = (env("HBIDX_SHARD"), env("HBIDX_REPLICA"));
        let port = listen_port(&args, name);
        if let Some(other) = identities.insert(identity, (name.to_string(), port)) {
            panic!("{path}: {name} and {} are both {identity:?}", other.0);
        }
        // Both keys come from the operator's environment, compose refusing to start without
        // them: the client key, and the instances' key for each other, without which an
        // instance of a tier does not start.
        for key in ["HBIDX_API_KEY", "HBIDX_CLUSTER_KEY"] {
            match &service["environment"][key] {
                Yaml::String(value) => {
                    assert!(value.starts_with(&format!("${{{key}:?")), "{value}")
                }
                other => panic!("{path}: {name}: {key}: {other:?}"),
            }
        }
    }

    // The config passes schema check, leaves the identity to the environment, and lists each
    // instance at its compose address in its (shard, replica) place.
    let config_file = config_file.unwrap();
    let checked = schema_check(&config_file, path);
    assert!(checked.contains("cluster: user: 2 shards"), "{checked}");
    let text = std::fs::read_to_string(&config_file).unwrap();
    let raw: toml::Table = toml::from_str(&text).unwrap();
    for key in ["shard", "replica"] {
        assert!(
            raw["cluster"].get(key).is_none(),
            "{}: [cluster] {key} is per instance (HBIDX_SHARD, HBIDX_REPLICA), not in the \
             shared file",
            config_file.display()
        );
    }
    assert_eq!(raw["store"]["thrift"].as_str(), Some("hbase-thrift:9090"));
    let cluster = cluster_of(&text, &config_file.display().to_string());
    assert_eq!(
        identities.keys().copied().collect::<BTreeSet<_>>(),
        every_shard_replica(&cluster),
        "{path}: the instances are not one per (shard, replica) of [cluster] shards"
    );
    for ((shard, replica), (name, port)) in &identities {
        assert_eq!(
            cluster.shards[*shard][*replica],
            format!("http://{name}:{port}"),
            "{path}: {name} is shard {shard} replica {replica}"
        );
        // Each identity is one the server accepts at start.
        cluster
            .clone()
            .with_identity(Some(*shard), Some(*replica))
            .unwrap_or_else(|err| panic!("{path}: {name}: {err}"));
    }

    // Prometheus scrapes every instance.
    let mounted = compose_mount(services["prometheus"], "/etc/prometheus/prometheus.yml").unwrap();
    let scrape = &load_yaml(&mounted)[0];
    check_scrape_config(scrape, &mounted.display().to_string());
    let targets: BTreeSet<String> = scrape["scrape_configs"][0]["static_configs"][0]["targets"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|t| str_of(t, "target").to_string())
        .collect();
    let instances: BTreeSet<String> = identities
        .values()
        .map(|(name, port)| format!("{name}:{port}"))
        .collect();
    assert_eq!(targets, instances, "{}", mounted.display());
}

fn check_scrape_config(config: &Yaml, origin: &str) {
    let jobs = config["scrape_configs"].as_vec().expect("scrape_configs");
    let job = jobs
        .iter()
        .find(|j| j["job_name"].as_str() == Some("hbidx"))
        .unwrap_or_else(|| panic!("{origin}: no hbidx job"));
    assert_eq!(job["metrics_path"].as_str(), Some("/metrics"), "{origin}");
    assert_eq!(
        job["authorization"]["type"].as_str(),
        Some("Bearer"),
        "{origin}"
    );
    assert!(
        job["authorization"]["credentials_file"].as_str().is_some(),
        "{origin}: the key comes from a file"
    );
}

#[test]
fn dockerfile_is_multi_stage_with_a_slim_runtime() {
    let text = std::fs::read_to_string("deploy/Dockerfile").unwrap();
    let stages: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("FROM "))
        .collect();
    assert!(stages.len() >= 2, "{stages:?}");
    assert!(stages[0].contains(" AS builder"), "{stages:?}");
    assert!(stages.last().unwrap().contains("-slim"), "{stages:?}");
    let builder: String = text.split("FROM ").nth(1).unwrap().to_string();
    // librdkafka builds with the image's own compiler and make: no cmake to install.
    assert!(!builder.contains("apt-get install"), "{builder}");
    // What ships is the production profile (whole-program optimisation), not the release one
    // the demo and the tests build.
    assert!(
        builder.contains("cargo build --profile production")
            && builder.contains("target/production/hbidx"),
        "{builder}"
    );
    assert!(text.contains("COPY --from=builder"));
    // The default command's config is one of deploy/config's files (copied to /etc/hbidx).
    let cmd = text.lines().find(|l| l.starts_with("CMD ")).expect("a CMD");
    let args: Vec<String> = serde_json::from_str(cmd.trim_start_matches("CMD ")).unwrap();
    let config = arg_after(&args, "--config").unwrap();
    let file = config
        .strip_prefix("/etc/hbidx/")
        .expect("under /etc/hbidx");
    assert!(Path::new("deploy/config").join(file).is_file(), "{config}");
    assert!(text.contains("COPY deploy/config/ /etc/hbidx/"));
}

#[test]
fn hbase_table_script_matches_hbidx_ddl() {
    let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(["--config", "deploy/config/hbidx-hbase.toml", "ddl", "user"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let ddl = String::from_utf8(output.stdout).unwrap();
    let script = std::fs::read_to_string("deploy/hbase/create-tables.hbase").unwrap();
    assert!(
        script.contains(ddl.trim()),
        "deploy/hbase/create-tables.hbase is out of date; `hbidx --config \
         deploy/config/hbidx-hbase.toml ddl user` prints:\n{ddl}"
    );
    assert!(
        script.contains("alter 'user', {NAME => 'info', REPLICATION_SCOPE => 1}"),
        "{script}"
    );
}

struct Manifests {
    docs: Vec<(PathBuf, Yaml)>,
}

impl Manifests {
    fn load() -> Self {
        let mut docs = Vec::new();
        for path in deploy_files(&["yaml", "yml"]) {
            if path.starts_with("deploy/k8s") {
                for doc in load_yaml(&path) {
                    docs.push((path.clone(), doc));
                }
            }
        }
        Self { docs }
    }

    /// The object of `kind` named `name` among the manifests in `dir`: the two layouts
    /// (deploy/k8s/, deploy/k8s/cluster/) both have a Service `hbidx`.
    fn find_in(&self, dir: &Path, kind: &str, name: &str) -> Option<&Yaml> {
        self.docs
            .iter()
            .find(|(path, d)| {
                path.parent() == Some(dir)
                    && d["kind"].as_str() == Some(kind)
                    && d["metadata"]["name"].as_str() == Some(name)
            })
            .map(|(_, d)| d)
    }

    /// The directory (layout) of the manifest `doc` came from.
    fn dir_of(&self, doc: &Yaml) -> &Path {
        self.docs
            .iter()
            .find(|(_, d)| std::ptr::eq(d, doc))
            .and_then(|(path, _)| path.parent())
            .expect("a loaded manifest")
    }

    fn named(&self, kind: &str) -> BTreeMap<String, &Yaml> {
        self.docs
            .iter()
            .filter(|(_, d)| d["kind"].as_str() == Some(kind))
            .map(|(_, d)| (str_of(&d["metadata"]["name"], "name").to_string(), d))
            .collect()
    }
}

fn container_ports(container: &Yaml) -> BTreeMap<String, i64> {
    container["ports"]
        .as_vec()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or_default().to_string(),
                        p["containerPort"].as_i64().expect("containerPort"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The hbidx command line a container runs: its `args`, or the words of its `sh -c` script
/// from `hbidx` on (line continuations and quotes dropped).
fn hbidx_args(container: &Yaml) -> Vec<String> {
    let command = strings(&container["command"]);
    let args = strings(&container["args"]);
    if command
        .first()
        .is_none_or(|program| !program.ends_with("/sh"))
    {
        return args;
    }
    let script = shell_script(container);
    let words: Vec<String> = script
        .split_whitespace()
        .filter(|word| *word != "\\")
        .map(|word| word.trim_matches('"').to_string())
        .collect();
    let start = words
        .iter()
        .position(|word| word.ends_with("/hbidx") || word == "hbidx")
        .unwrap_or_else(|| panic!("the script runs no hbidx: {script}"));
    words[start + 1..].to_vec()
}

/// The script of a container whose command is `sh -c SCRIPT`.
fn shell_script(container: &Yaml) -> String {
    let words: Vec<String> = strings(&container["command"])
        .into_iter()
        .chain(strings(&container["args"]))
        .collect();
    let at = words.iter().position(|w| w == "-c").expect("sh -c");
    words[at + 1].clone()
}

fn probe_path_and_port(container: &Yaml, probe: &str) -> (String, String) {
    let get = &container[probe]["httpGet"];
    let port = match &get["port"] {
        Yaml::String(name) => name.clone(),
        Yaml::Integer(n) => n.to_string(),
        other => panic!("{probe}.httpGet.port: {other:?}"),
    };
    (str_of(&get["path"], probe).to_string(), port)
}

#[test]
fn kubernetes_sidecar_probes_secrets_and_config() {
    let manifests = Manifests::load();
    assert!(!manifests.docs.is_empty());
    for (path, doc) in &manifests.docs {
        for key in ["apiVersion", "kind"] {
            assert!(doc[key].as_str().is_some(), "{}: no {key}", path.display());
        }
        assert!(
            doc["metadata"]["name"].as_str().is_some(),
            "{}: no metadata.name",
            path.display()
        );
    }
    // deploy/k8s/ and deploy/k8s/cluster/ are two layouts, each applied as a whole: within one
    // directory no two objects share a kind and name.
    let mut objects = BTreeSet::new();
    for (path, doc) in &manifests.docs {
        let object = (
            path.parent().unwrap().to_path_buf(),
            str_of(&doc["kind"], "kind"),
            str_of(&doc["metadata"]["name"], "name"),
        );
        assert!(objects.insert(object.clone()), "{object:?} twice");
    }
    let secrets = manifests.named("Secret");
    let scripted = key_secrets_script().1;
    for secret in &scripted {
        assert!(
            !secrets.contains_key(secret.as_str()),
            "Secret {secret} is both in a manifest and made by create-key-secrets.sh"
        );
    }
    let config_maps = manifests.named("ConfigMap");
    let workloads: Vec<&Yaml> = manifests
        .docs
        .iter()
        .map(|(_, d)| d)
        .filter(|d| matches!(d["kind"].as_str(), Some("StatefulSet" | "Deployment")))
        .collect();
    assert!(!workloads.is_empty());
    let mut checked_configs = 0;
    for workload in workloads {
        let name = str_of(&workload["metadata"]["name"], "name");
        let pod = &workload["spec"]["template"]["spec"];
        let labels = &workload["spec"]["template"]["metadata"]["labels"];
        for (key, value) in workload["spec"]["selector"]["matchLabels"]
            .as_hash()
            .unwrap()
        {
            assert_eq!(&labels[str_of(key, "label")], value, "{name}: selector");
        }
        let containers = pod["containers"].as_vec().expect("containers");
        let by_name: BTreeMap<&str, &Yaml> = containers
            .iter()
            .map(|c| (str_of(&c["name"], "container name"), c))
            .collect();
        let Some(hbidx) = by_name.get("hbidx") else {
            continue;
        };
        // The sidecar layout: hbidx beside the HBase Thrift server, in one pod.
        let thrift = by_name
            .get("hbase-thrift")
            .unwrap_or_else(|| panic!("{name}: hbidx without the Thrift server beside it"));
        // HBase's Thrift server (no authentication) listens on loopback only: hbidx beside it
        // is its one client. Its port is the command's.
        let command = strings(&thrift["command"]);
        assert_eq!(
            arg_after(&command, "--bind").as_deref(),
            Some("127.0.0.1"),
            "{name}: the HBase Thrift server must bind loopback: {command:?}"
        );
        assert!(
            thrift["ports"].is_badvalue(),
            "{name}: the loopback Thrift server declares a port"
        );
        let thrift_port: i64 = arg_after(&command, "-p")
            .expect("hbase thrift start -p PORT")
            .parse()
            .unwrap();
        // Every container runs as a user, on a read-only root filesystem, without privileges.
        for container in containers {
            let context = &container["securityContext"];
            let container_name = str_of(&container["name"], "container name");
            assert_eq!(
                context["runAsNonRoot"].as_bool(),
                Some(true),
                "{name}/{container_name}"
            );
            assert_eq!(
                context["readOnlyRootFilesystem"].as_bool(),
                Some(true),
                "{name}/{container_name}"
            );
            assert_eq!(
                context["allowPrivilegeEscalation"].as_bool(),
                Some(false),
                "{name}/{container_name}"
            );
        }
        // A NetworkPolicy of the same layout selects these pods and lets in port 8080 only.
        let dir = manifests.dir_of(workload);
        let policy = manifests
            .docs
            .iter()
            .filter(|(path, doc)| {
                path.parent() == Some(dir) && doc["kind"].as_str() == Some("NetworkPolicy")
            })
            .map(|(_, doc)| doc)
            .find(|doc| {
                doc["spec"]["podSelector"]["matchLabels"]
                    .as_hash()
                    .unwrap()
                    .iter()
                    .all(|(key, value)| &labels[str_of(key, "label")] == value)
            })
            .unwrap_or_else(|| panic!("{name}: no NetworkPolicy selects its pods"));
        for rule in policy["spec"]["ingress"].as_vec().unwrap() {
            let ports: Vec<i64> = rule["ports"]
                .as_vec()
                .expect("an ingress rule names its ports")
                .iter()
                .map(|p| p["port"].as_i64().unwrap())
                .collect();
            assert_eq!(ports, vec![8080], "{name}: NetworkPolicy ports");
        }
        let ports = container_ports(hbidx);
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let (probe_path, port) = probe_path_and_port(hbidx, probe);
            assert_eq!(probe_path, path, "{name}: hbidx {probe}");
            assert!(
                ports.contains_key(&port) || ports.values().any(|p| p.to_string() == port),
                "{name}: {probe} port {port} isn't a port of the container"
            );
        }
        if !hbidx["startupProbe"].is_badvalue() {
            let (path, _) = probe_path_and_port(hbidx, "startupProbe");
            assert!(path == "/healthz" || path == "/readyz", "{path}");
        }
        // Volumes and env come from manifests that exist.
        let mut volume_sources = BTreeMap::new();
        for volume in pod["volumes"].as_vec().into_iter().flatten() {
            let volume_name = str_of(&volume["name"], "volume name").to_string();
            if let Some(secret) = volume["secret"]["secretName"].as_str() {
                assert!(secrets.contains_key(secret), "{name}: no Secret {secret}");
                volume_sources.insert(volume_name, secret.to_string());
            } else if let Some(map) = volume["configMap"]["name"].as_str() {
                assert!(config_maps.contains_key(map), "{name}: no ConfigMap {map}");
            }
        }
        for container in containers {
            for env in container["env"].as_vec().into_iter().flatten() {
                if let Some(secret) = env["valueFrom"]["secretKeyRef"]["name"].as_str() {
                    let key = str_of(&env["valueFrom"]["secretKeyRef"]["key"], "key");
                    // Key Secrets are made by create-key-secrets.sh, never applied from a file.
                    if scripted.contains(secret) {
                        assert_eq!(key, "key", "{name}: Secret {secret}");
                        continue;
                    }
                    let data = &secrets
                        .get(secret)
                        .unwrap_or_else(|| panic!("{name}: env from unknown Secret {secret}"))["stringData"];
                    assert!(
                        !data[key].is_badvalue(),
                        "{name}: Secret {secret} has no {key}"
                    );
                }
            }
        }
        // The --config file is in a mounted Secret, and passes schema check.
        let args = hbidx_args(hbidx);
        let config_path = arg_after(&args, "--config").expect("--config");
        let mount = hbidx["volumeMounts"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|m| config_path.starts_with(str_of(&m["mountPath"], "mountPath")))
            .expect("the config's directory is mounted");
        let secret = &volume_sources[str_of(&mount["name"], "mount name")];
        let file_name = Path::new(&config_path)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        let text = str_of(&secrets[secret]["stringData"][file_name], file_name);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(file_name);
        std::fs::write(&file, text).unwrap();
        let checked = schema_check(&file, &format!("Secret {secret}"));
        assert!(
            checked.contains("API key(s)") && !checked.contains(" 0 API key(s)"),
            "{checked}"
        );
        // It reads rows through the Thrift server in the same pod.
        let config: toml::Table = toml::from_str(text).unwrap();
        assert_eq!(config["store"]["kind"].as_str(), Some("hbase"));
        assert_eq!(
            config["store"]["thrift"].as_str(),
            Some(format!("127.0.0.1:{thrift_port}").as_str())
        );
        checked_configs += 1;
    }
    assert!(checked_configs > 0, "no workload runs hbidx");

    // Services point at named ports that exist in the pods they select.
    let all_ports: BTreeSet<String> = manifests
        .docs
        .iter()
        .flat_map(|(_, d)| {
            d["spec"]["template"]["spec"]["containers"]
                .as_vec()
                .into_iter()
                .flatten()
        })
        .flat_map(|c| container_ports(c).into_keys())
        .collect();
    for (service_name, service) in manifests.named("Service") {
        for port in service["spec"]["ports"].as_vec().unwrap() {
            // HBase's Thrift server is for hbidx in its pod only.
            assert_ne!(
                port["port"].as_i64(),
                Some(9090),
                "Service {service_name} exposes the HBase Thrift port"
            );
            if let Some(target) = port["targetPort"].as_str() {
                assert!(
                    all_ports.contains(target),
                    "Service {service_name}: no port {target}"
                );
            }
        }
    }

    // The Prometheus scrape example sends a bearer credential to /metrics.
    let scrape = &config_maps["prometheus-hbidx-scrape"]["data"]["hbidx-scrape.yml"];
    let scrape = YamlLoader::load_from_str(str_of(scrape, "hbidx-scrape.yml")).unwrap();
    check_scrape_config(&scrape[0], "deploy/k8s/prometheus-scrape.yaml");
}

/// The hbidx config a workload's hbidx container reads (`--config`), from the Secret mounted
/// there.
fn workload_config(manifests: &Manifests, workload: &Yaml) -> String {
    let pod = &workload["spec"]["template"]["spec"];
    let hbidx = pod["containers"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some("hbidx"))
        .expect("an hbidx container");
    let config_path = arg_after(&hbidx_args(hbidx), "--config").expect("--config");
    let config_path = Path::new(&config_path);
    let mount = hbidx["volumeMounts"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|m| config_path.starts_with(str_of(&m["mountPath"], "mountPath")))
        .expect("the config's directory is mounted");
    let volume = pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    let secret = str_of(&volume["secret"]["secretName"], "secretName");
    let file_name = config_path.file_name().unwrap().to_str().unwrap();
    str_of(
        &manifests.named("Secret")[secret]["stringData"][file_name],
        file_name,
    )
    .to_string()
}

#[test]
fn kubernetes_cluster_statefulset_maps_ordinals_to_the_layout() {
    let manifests = Manifests::load();
    let mut checked = 0;
    for (path, workload) in &manifests.docs {
        if workload["kind"].as_str() != Some("StatefulSet") {
            continue;
        }
        let name = str_of(&workload["metadata"]["name"], "name");
        let containers = workload["spec"]["template"]["spec"]["containers"]
            .as_vec()
            .unwrap();
        let Some(hbidx) = containers
            .iter()
            .find(|c| c["name"].as_str() == Some("hbidx"))
        else {
            continue;
        };
        let text = workload_config(&manifests, workload);
        let config = hbidx_schema::config::parse_config(&text)
            .unwrap_or_else(|err| panic!("StatefulSet {name}'s config: {err}"));
        let Some(cluster) = config.cluster else {
            continue;
        };
        let origin = format!("StatefulSet {name}");

        // One pod per shard replica, every shard with the same number of replicas, which the
        // identity script divides the ordinal by.
        let per_shard: usize = hbidx["env"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|e| e["name"].as_str() == Some("REPLICAS_PER_SHARD"))
            .map(|e| str_of(&e["value"], "REPLICAS_PER_SHARD").parse().unwrap())
            .unwrap_or_else(|| panic!("{origin}: no REPLICAS_PER_SHARD"));
        for (shard, replicas) in cluster.shards.iter().enumerate() {
            assert_eq!(replicas.len(), per_shard, "{origin}: shard {shard}");
        }
        let pods = workload["spec"]["replicas"].as_i64().expect("replicas") as usize;
        assert_eq!(
            pods,
            cluster.shard_count() * per_shard,
            "{origin}: replicas = shards x REPLICAS_PER_SHARD"
        );
        let script = shell_script(hbidx);
        for piece in [
            "ordinal=\"${HOSTNAME##*-}\"",
            "--shard \"$((ordinal / REPLICAS_PER_SHARD))\"",
            "--replica \"$((ordinal % REPLICAS_PER_SHARD))\"",
        ] {
            assert!(script.contains(piece), "{origin}: no `{piece}` in {script}");
        }
        assert!(
            !text.contains("\nshard =") && !text.contains("\nreplica ="),
            "{origin}: the identity comes from the ordinal, not the shared config"
        );

        // Pod N is at http://NAME-N.SERVICE:PORT, a headless Service over these pods that
        // keeps not-ready pods' names.
        let service_name = str_of(&workload["spec"]["serviceName"], "serviceName");
        let service = manifests
            .find_in(path.parent().unwrap(), "Service", service_name)
            .unwrap_or_else(|| panic!("{origin}: no Service {service_name} beside it"));
        assert_eq!(
            service["spec"]["clusterIP"].as_str(),
            Some("None"),
            "{origin}"
        );
        assert_eq!(
            service["spec"]["publishNotReadyAddresses"].as_bool(),
            Some(true),
            "{origin}"
        );
        assert_eq!(
            service["spec"]["selector"], workload["spec"]["selector"]["matchLabels"],
            "{origin}: {service_name} selects the pods"
        );
        let port = listen_port(&hbidx_args(hbidx), &origin);
        let mut identities = BTreeSet::new();
        for ordinal in 0..pods {
            let (shard, replica) = (ordinal / per_shard, ordinal % per_shard);
            assert_eq!(
                cluster.shards[shard][replica],
                format!("http://{name}-{ordinal}.{service_name}:{port}"),
                "{origin}: pod {ordinal} is shard {shard} replica {replica}"
            );
            cluster
                .clone()
                .with_identity(Some(shard), Some(replica))
                .unwrap_or_else(|err| panic!("{origin}: pod {ordinal}: {err}"));
            identities.insert((shard, replica));
        }
        assert_eq!(identities, every_shard_replica(&cluster), "{origin}");

        // Each pod's index in a volume of its own; peers called with a key from a Secret that
        // the config accepts for the cluster scope.
        let data_dir = arg_after(&hbidx_args(hbidx), "--data-dir").expect("--data-dir");
        let mount = hbidx["volumeMounts"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(data_dir.as_str()))
            .unwrap_or_else(|| panic!("{origin}: {data_dir} is not mounted"));
        assert!(
            workload["spec"]["volumeClaimTemplates"]
                .as_vec()
                .into_iter()
                .flatten()
                .any(|claim| claim["metadata"]["name"] == mount["name"]),
            "{origin}: {data_dir} is not a volume claim per pod"
        );
        let cluster_key = hbidx["env"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|e| e["name"].as_str() == Some("HBIDX_CLUSTER_KEY"))
            .unwrap_or_else(|| panic!("{origin}: no HBIDX_CLUSTER_KEY"));
        assert!(
            cluster_key["valueFrom"]["secretKeyRef"]["name"]
                .as_str()
                .is_some(),
            "{origin}: HBIDX_CLUSTER_KEY comes from a Secret"
        );
        // hbidx takes HBIDX_CLUSTER_KEY with the cluster scope alone; a configured key with
        // that scope must have no other, or the peers' key would be a client key too.
        for key in &config.security.keys {
            let cluster = key.scopes.iter().any(|scope| scope.as_str() == "cluster");
            assert!(
                !cluster || key.scopes.len() == 1,
                "{origin}: [[security.keys]] \"{}\" has the cluster scope and others",
                key.id
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "no StatefulSet runs a [cluster] layout");
}

/// deploy/k8s/create-key-secrets.sh: its text and the Secrets it creates (`secret NAME ID SCOPE`
/// lines).
fn key_secrets_script() -> (PathBuf, BTreeSet<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/k8s/create-key-secrets.sh");
    let text = std::fs::read_to_string(&path).unwrap();
    let names = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("secret hbidx-"))
        .map(|rest| format!("hbidx-{}", rest.split_whitespace().next().unwrap()))
        .collect();
    (path, names)
}

/// No file under deploy/ holds a usable API key or a placeholder that could pass for one: an
/// example applied by accident must not open the service.
#[test]
fn no_deploy_file_holds_a_usable_key() {
    let mut files = Vec::new();
    files_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"),
        &mut files,
    );
    assert!(files.len() > 10);
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            let at = format!("{}:{}", path.display(), number + 1);
            assert!(!line.contains("REPLACE"), "{at}: a placeholder: {line}");
            for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')) {
                assert!(
                    hbidx_schema::config::check_plaintext_key(word).is_err(),
                    "{at}: an API key in a deploy file"
                );
            }
        }
    }
}

/// create-key-secrets.sh, run with the real `hbidx` and a kubectl that records what it is
/// asked (there is no cluster here): one Secret per key, each a fresh key of the form hbidx
/// accepts, and the printed entry is the Prometheus key's hash.
#[test]
fn create_key_secrets_makes_fresh_keys() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    let kubectl = dir.path().join("kubectl");
    std::fs::write(
        &kubectl,
        format!("#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\n", calls.display()),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&kubectl).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&kubectl, permissions).unwrap();
    let (script, names) = key_secrets_script();
    let output = Command::new("sh")
        .arg(&script)
        .arg("--cluster")
        .env("HBIDX", env!("CARGO_BIN_EXE_hbidx"))
        .env("KUBECTL", &kubectl)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let calls = std::fs::read_to_string(&calls).unwrap();
    let mut keys = BTreeMap::new();
    for line in calls
        .lines()
        .filter(|l| l.starts_with("create secret generic "))
    {
        let mut words = line["create secret generic ".len()..].split_whitespace();
        let name = words.next().unwrap().to_string();
        let key = words
            .next()
            .and_then(|w| w.strip_prefix("--from-literal=key="))
            .unwrap_or_else(|| panic!("{line}"))
            .to_string();
        hbidx_schema::config::check_plaintext_key(&key).unwrap();
        keys.insert(name, key);
    }
    assert_eq!(keys.keys().cloned().collect::<BTreeSet<_>>(), names);
    let distinct: BTreeSet<&String> = keys.values().collect();
    assert_eq!(distinct.len(), keys.len(), "every Secret its own key");
    // The printed entry is the Prometheus key's, by hash, and parses as config.
    let entry = String::from_utf8(output.stdout).unwrap();
    let security = hbidx_schema::parse_config(&entry).unwrap().security;
    assert_eq!(security.keys.len(), 1, "{entry}");
    assert_eq!(security.keys[0].id, "prometheus");
    assert_eq!(
        security.keys[0].sha256,
        hbidx_schema::config::hash_key(&keys["hbidx-prometheus-key"])
    );
}
