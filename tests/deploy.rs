//! Static checks of deploy/: there is no Docker engine or Kubernetes cluster here, so the
//! manifests are checked for what can be checked without one. Every YAML and JSON file parses;
//! compose and Kubernetes references (services, files, volumes, Secrets, named ports) resolve;
//! the probes hit /healthz and /readyz; and every hbidx config they use passes the real
//! binary's `hbidx schema check`.

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

#[test]
fn compose_references_resolve_and_its_hbidx_config_passes() {
    let docs = load_yaml(Path::new("deploy/docker-compose.yml"));
    let compose = &docs[0];
    let services = compose["services"]
        .as_hash()
        .expect("services")
        .iter()
        .map(|(name, service)| (str_of(name, "service").to_string(), service))
        .collect::<BTreeMap<_, _>>();
    for wanted in ["hbase", "hbase-thrift", "kafka", "kafka-proxy", "hbidx"] {
        assert!(services.contains_key(wanted), "no {wanted} service");
    }
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
                "{name} depends on unknown service {dependency}"
            );
        }
        match &service["build"] {
            Yaml::BadValue => {
                let image = str_of(&service["image"], "image");
                assert!(
                    built_images.contains(image)
                        || (image.contains(':') && !image.ends_with(":latest")),
                    "{name}: image {image} is neither built here nor pinned to a tag"
                );
            }
            Yaml::String(context) => {
                assert!(
                    Path::new("deploy")
                        .join(context)
                        .join("Dockerfile")
                        .is_file(),
                    "{name}: no Dockerfile in {context}"
                );
            }
            build => {
                let context = Path::new("deploy").join(str_of(&build["context"], "context"));
                let dockerfile = context.join(str_of(&build["dockerfile"], "dockerfile"));
                assert!(
                    dockerfile.is_file(),
                    "{name}: {} missing",
                    dockerfile.display()
                );
            }
        }
        for volume in strings(&service["volumes"]) {
            let host = volume.split(':').next().unwrap();
            if host.starts_with('.') || host.starts_with('/') {
                assert!(
                    Path::new("deploy").join(host).exists(),
                    "{name}: mounts {host}, which doesn't exist"
                );
            } else {
                assert!(
                    named_volumes.contains(host),
                    "{name}: volume {host} isn't declared"
                );
            }
        }
        for secret in strings(&service["secrets"]) {
            assert!(
                secrets.contains(&secret),
                "{name}: secret {secret} isn't declared"
            );
        }
    }

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
    let secrets = manifests.named("Secret");
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
        let thrift_port = container_ports(thrift)["thrift"];
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
        let args = strings(&hbidx["args"]);
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
