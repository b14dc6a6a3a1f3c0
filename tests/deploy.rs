//! The container and the Kubernetes manifests of deploy/.
//!
//! - The manifests are valid objects of every Kubernetes version from 1.30 to 1.37, by the
//!   schemas kubernetes-validate bundles (offline), strictly: an unknown field is an error. A
//!   broken copy of the Deployment is rejected, so the check is not vacuous.
//! - hadolint finds nothing in the Dockerfile (and does find the faults of a bad one).
//! - What no schema can see, read from the files themselves: the pods outlive the steps in
//!   flight when stopped, the probes, the ports, the Secret, what the autoscaler, the disruption
//!   budget and the Service select, the Dockerfile's user, health check and build context, and
//!   every `REACTSTEP_*` value the Deployment sets is one the service's own parser accepts.
//! - The Dockerfile's HEALTHCHECK command, run by `sh` as Docker runs it, succeeds against the
//!   real binary and fails (with the status Docker expects) when nothing listens.
//!
//! The tools come from PyPI (tests/deploy/requirements.txt, every version pinned) into a
//! virtualenv under the target directory, installed by the first run and reused while the
//! requirements are unchanged. It needs `python3` with its `venv` module, and `curl` for the
//! health check; without them it fails saying so, never skips.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

#[path = "support/venv.rs"]
mod venv;

use clap::{CommandFactory, FromArgMatches};
use reactstep::config::{ApiTokens, Config};
use serde_json::Value;

/// The Kubernetes versions the manifests must be valid for: 1.30 is the first whose kubelet
/// runs the preStop `sleep` action by default; 1.37 is the newest the validator bundles.
const KUBERNETES_VERSIONS: std::ops::RangeInclusive<u32> = 30..=37;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn kubernetes_dir() -> PathBuf {
    repo().join("deploy/kubernetes")
}

fn shown(output: &Output) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `program`; `hint` says what to install when it cannot run at all.
fn run_or(hint: &str, program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{} could not run ({e}): {hint}", program.display()))
}

/// Runs one of the virtualenv's tools.
fn run(program: &Path, args: &[&str]) -> Output {
    run_or(
        "the virtualenv lacks it: remove target/tmp/deploy-venv and run cargo test again",
        program,
        args,
    )
}

/// The virtualenv's bin folder, with tests/deploy/requirements.txt installed; once per run, and
/// again only when the requirements change.
fn tools() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let requirements = repo().join("tests/deploy/requirements.txt");
        let wanted = std::fs::read(&requirements).expect("tests/deploy/requirements.txt reads");
        let requirements = requirements.to_str().expect("the repository path is UTF-8");
        venv::ready(
            "deploy-venv",
            &wanted,
            &[&["--quiet", "--requirement", requirements]],
        )
    })
}

/// Reads one YAML document as JSON values (numbers stay numbers, strings strings).
fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} could not be read: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

/// The files kustomization.yaml applies, by name.
fn resource_files() -> Vec<String> {
    let kustomization = yaml(&kubernetes_dir().join("kustomization.yaml"));
    kustomization["resources"]
        .as_array()
        .expect("kustomization.yaml lists its resources")
        .iter()
        .map(|r| r.as_str().expect("a resource is a file name").to_string())
        .collect()
}

/// Every object the manifests hold, by kind; each kind once.
fn manifests() -> BTreeMap<String, Value> {
    let mut by_kind = BTreeMap::new();
    for file in resource_files() {
        let object = yaml(&kubernetes_dir().join(&file));
        let kind = object["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("{file} has no kind"))
            .to_string();
        assert!(
            by_kind.insert(kind.clone(), object).is_none(),
            "two objects of kind {kind}"
        );
    }
    by_kind
}

fn kind<'a>(manifests: &'a BTreeMap<String, Value>, kind: &str) -> &'a Value {
    manifests
        .get(kind)
        .unwrap_or_else(|| panic!("no {kind} among deploy/kubernetes/'s resources"))
}

/// The Deployment's one container.
fn container(deployment: &Value) -> &Value {
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .expect("the Deployment has containers");
    assert_eq!(containers.len(), 1, "one container, reactstep");
    &containers[0]
}

/// kubernetes-validate, strictly, against each version of [`KUBERNETES_VERSIONS`]. Ok only when
/// every object of every file passed against every version: the tool itself only warns (and
/// exits 0) about an object it has no schema for, such as a misspelt kind.
fn validate(files: &[PathBuf]) -> Result<(), String> {
    let mut args = vec!["--strict".to_string()];
    for minor in KUBERNETES_VERSIONS {
        args.extend(["--kubernetes-version".into(), format!("1.{minor}.0")]);
    }
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run(&tools().join("kubernetes-validate"), &args);
    let report = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "kubernetes-validate exited with {}:\n{}",
            output.status,
            shown(&output)
        ));
    }
    let mut passed = BTreeSet::new();
    for line in report.lines().filter(|l| !l.trim().is_empty()) {
        // INFO <file> passed for resource <kind>/<name> against version 1.30
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["INFO", file, "passed", "for", "resource", object, "against", "version", version] => {
                passed.insert((file.to_string(), object.to_string(), version.to_string()));
            }
            _ => {
                return Err(format!(
                    "kubernetes-validate did not pass: {line}\n{report}"
                ))
            }
        }
    }
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let objects = serde_yaml::Deserializer::from_str(&text).count();
        for minor in KUBERNETES_VERSIONS {
            let version = format!("1.{minor}");
            let count = passed
                .iter()
                .filter(|(f, _, v)| *f == file.display().to_string() && *v == version)
                .count();
            if count != objects {
                return Err(format!(
                    "{} holds {objects} objects, {count} passed against {version}:\n{report}",
                    file.display()
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn the_manifests_are_valid_for_kubernetes_1_30_to_1_37() {
    let files: Vec<PathBuf> = resource_files()
        .iter()
        .map(|f| kubernetes_dir().join(f))
        .collect();
    assert_eq!(files.len(), 5, "{files:?}");
    validate(&files).unwrap_or_else(|why| panic!("{why}"));
}

#[test]
fn a_broken_deployment_is_rejected() {
    let original = std::fs::read_to_string(kubernetes_dir().join("deployment.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let broken = [
        // A number written as a string.
        (
            "terminationGracePeriodSeconds: 150",
            "terminationGracePeriodSeconds: \"150\"",
            "terminationGracePeriodSeconds",
        ),
        // A field no schema knows (the s of Filesystem in capitals).
        (
            "readOnlyRootFilesystem: true",
            "readOnlyRootFileSystem: true",
            "readOnlyRootFileSystem",
        ),
        // A kind no schema knows: the tool only warns, validate() fails.
        ("kind: Deployment", "kind: Deploymnet", "Deploymnet"),
    ];
    for (i, (from, to, named)) in broken.iter().enumerate() {
        assert_eq!(
            original.matches(from).count(),
            1,
            "deployment.yaml holds {from:?} once"
        );
        let file = dir.path().join(format!("broken-{i}.yaml"));
        std::fs::write(&file, original.replace(from, to)).unwrap();
        let why = validate(&[file]).expect_err(&format!("{to:?} is rejected"));
        assert!(why.contains(named), "the failure names {named}: {why}");
    }
    // The same harness passes the file unchanged, from the same folder.
    let file = dir.path().join("unchanged.yaml");
    std::fs::write(&file, &original).unwrap();
    validate(&[file]).unwrap_or_else(|why| panic!("{why}"));
}

#[test]
fn kustomization_applies_every_manifest_and_sets_the_deployments_image() {
    let mut listed: Vec<String> = resource_files();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(kubernetes_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present, "kustomization.yaml lists every manifest");

    let kustomization = yaml(&kubernetes_dir().join("kustomization.yaml"));
    let manifests = manifests();
    let image = container(kind(&manifests, "Deployment"))["image"]
        .as_str()
        .unwrap();
    let repository = image.rsplit_once(':').map_or(image, |(r, _)| r);
    let images = kustomization["images"].as_array().unwrap();
    assert!(
        images.iter().any(|i| i["name"] == repository),
        "kustomization.yaml's images name the Deployment's {repository}"
    );
}

/// deploy/Dockerfile, read as Docker reads it: continued lines joined, comments dropped.
struct Dockerfile {
    /// Each stage's instructions: (instruction in capitals, the rest of the line).
    stages: Vec<Vec<(String, String)>>,
}

impl Dockerfile {
    fn read() -> Self {
        let text = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
        let mut logical = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
                continue;
            }
            match trimmed.strip_suffix('\\') {
                Some(part) => {
                    current.push_str(part);
                    current.push(' ');
                }
                None => {
                    current.push_str(trimmed);
                    logical.push(std::mem::take(&mut current));
                }
            }
        }
        assert!(
            current.is_empty(),
            "the Dockerfile ends inside a continued line"
        );
        let mut stages: Vec<Vec<(String, String)>> = Vec::new();
        for line in logical {
            let (instruction, rest) = line.split_once(' ').unwrap_or((&line, ""));
            let instruction = instruction.to_ascii_uppercase();
            if instruction == "FROM" {
                stages.push(Vec::new());
            }
            if let Some(stage) = stages.last_mut() {
                stage.push((instruction, rest.trim().to_string()));
            }
        }
        Self { stages }
    }

    fn runtime(&self) -> &[(String, String)] {
        self.stages.last().expect("the Dockerfile has a FROM")
    }

    /// The last value of `instruction` in the runtime stage.
    fn last(&self, instruction: &str) -> &str {
        self.runtime()
            .iter()
            .rev()
            .find(|(i, _)| i == instruction)
            .map(|(_, rest)| rest.as_str())
            .unwrap_or_else(|| panic!("the runtime stage has no {instruction}"))
    }

    /// The runtime stage's `ENV name=value`.
    fn env(&self, name: &str) -> String {
        self.runtime()
            .iter()
            .filter(|(i, _)| i == "ENV")
            .find_map(|(_, rest)| rest.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("the runtime stage sets no {name}"))
            .trim_matches('"')
            .to_string()
    }

    /// The HEALTHCHECK's command as `sh -c` would get it.
    fn health_command(&self) -> String {
        let healthcheck = self.last("HEALTHCHECK");
        let (_, command) = healthcheck
            .split_once("CMD ")
            .expect("HEALTHCHECK has a CMD");
        let command = command.trim();
        if !command.starts_with('[') {
            return command.to_string();
        }
        let argv: Vec<String> =
            serde_json::from_str(command).expect("the exec form is a JSON array");
        match argv.as_slice() {
            [shell, c, script] if shell.ends_with("sh") && c == "-c" => script.clone(),
            _ => argv.join(" "),
        }
    }
}

/// The port of an `address:port` setting.
fn port_of(bind: &str) -> u16 {
    bind.parse::<std::net::SocketAddr>()
        .unwrap_or_else(|e| panic!("{bind:?} is not an address and port: {e}"))
        .port()
}

#[test]
fn the_image_is_a_release_build_run_by_a_non_root_user_with_a_health_check() {
    let dockerfile = Dockerfile::read();
    assert!(
        dockerfile.stages.len() >= 2,
        "a build stage and a runtime stage"
    );

    let build = dockerfile.stages[..dockerfile.stages.len() - 1].concat();
    let cargo = build
        .iter()
        .find(|(i, rest)| i == "RUN" && rest.contains("cargo build"))
        .map(|(_, rest)| rest.as_str())
        .expect("a build stage runs cargo build");
    // The image is the service: the loop driver's commands are a client's, left out.
    for flag in ["--release", "--locked", "--no-default-features"] {
        assert!(cargo.contains(flag), "cargo build {flag}: {cargo}");
    }

    let user = dockerfile.last("USER");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    let uid: u32 = uid.parse().expect("USER is numeric, for runAsNonRoot");
    let gid: u32 = gid.parse().expect("USER's group is numeric");
    assert_ne!(uid, 0, "the runtime user is not root");
    let manifests = manifests();
    let pod = kind(&manifests, "Deployment")
        .pointer("/spec/template/spec")
        .unwrap();
    assert_eq!(pod["securityContext"]["runAsUser"], uid);
    assert_eq!(pod["securityContext"]["runAsGroup"], gid);

    let health = dockerfile.health_command();
    assert!(
        health.contains("/healthz"),
        "HEALTHCHECK calls /healthz: {health}"
    );
    // The program the check runs is installed in the runtime image.
    let program = health.split_whitespace().next().unwrap();
    assert!(
        dockerfile.runtime().iter().any(|(i, rest)| i == "RUN"
            && rest.contains("apt-get install")
            && rest.split_whitespace().any(|w| w == program)),
        "the runtime stage installs {program}, which HEALTHCHECK runs"
    );

    // Exec form: the service itself is PID 1 and gets SIGTERM (a shell would not pass it on).
    let entrypoint: Vec<String> =
        serde_json::from_str(dockerfile.last("ENTRYPOINT")).expect("ENTRYPOINT is in exec form");
    assert_eq!(entrypoint, ["/usr/local/bin/reactstep"]);
    assert!(
        dockerfile
            .runtime()
            .iter()
            .any(|(i, rest)| i == "COPY" && rest.ends_with(" /usr/local/bin/reactstep")),
        "the runtime stage copies the binary it runs"
    );

    // Listens on every address of the container, on the port it exposes.
    let bind = dockerfile.env("REACTSTEP_BIND");
    let address: std::net::SocketAddr = bind.parse().unwrap();
    assert!(address.ip().is_unspecified(), "REACTSTEP_BIND={bind}");
    let exposed: u16 = dockerfile.last("EXPOSE").parse().unwrap();
    assert_eq!(address.port(), exposed);
}

/// Whether the .dockerignore at the repository root lets `path` into the build context. It
/// reads the patterns this repository uses (`*`, and paths with an optional `!` before and `/`
/// after them) and fails on any other, rather than guess.
fn in_build_context(path: &str) -> bool {
    let text = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    let mut included = true;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (include, pattern) = match line.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, line),
        };
        let pattern = pattern.trim_start_matches('/').trim_end_matches('/');
        assert!(
            pattern == "*" || !pattern.contains(['*', '?', '[']),
            ".dockerignore pattern {line:?}: teach in_build_context to read it"
        );
        let first = path.split('/').next().unwrap();
        let matches = (pattern == "*" && !first.is_empty())
            || path == pattern
            || path.starts_with(&format!("{pattern}/"));
        if matches {
            included = include;
        }
    }
    included
}

#[test]
fn the_build_context_holds_what_the_build_copies_and_nothing_heavy() {
    let dockerfile = Dockerfile::read();
    let build = &dockerfile.stages[0];
    let mut sources = Vec::new();
    for (_, rest) in build.iter().filter(|(i, _)| i == "COPY") {
        let words: Vec<&str> = rest.split_whitespace().collect();
        assert!(
            !words.iter().any(|w| w.starts_with("--from")),
            "the build stage copies from the context only"
        );
        sources.extend(
            words[..words.len() - 1]
                .iter()
                .map(|s| s.trim_end_matches('/')),
        );
    }
    assert!(sources.contains(&"src"), "{sources:?}");
    for source in sources {
        assert!(repo().join(source).exists(), "{source} exists");
        assert!(in_build_context(source), ".dockerignore lets {source} in");
        if repo().join(source).is_dir() {
            assert!(in_build_context(&format!("{source}/x.rs")));
        }
    }
    for heavy in [
        "target",
        ".git",
        "clients/typescript/node_modules",
        "fuzz",
        "tests",
    ] {
        assert!(!in_build_context(heavy), ".dockerignore keeps {heavy} out");
    }
}

/// The service's configuration as the Deployment's plain `REACTSTEP_*` values give it, read by
/// the service's own parser: each variable is one the service reads (a misspelt name would be
/// ignored in the pod, silently), each value one it accepts, and what is not set takes the
/// service's default. The process's own environment is not read.
fn deployment_config(container: &Value) -> Config {
    let command = Config::command();
    let flags: BTreeMap<String, String> = command
        .get_arguments()
        .filter_map(|a| {
            Some((
                a.get_env()?.to_str()?.to_string(),
                a.get_long()?.to_string(),
            ))
        })
        .collect();
    // The providers' variables, which are read without a flag.
    let asked = std::cell::RefCell::new(BTreeSet::new());
    Config::defaults().read_provider_variables(|name| {
        asked.borrow_mut().insert(name.to_string());
        None
    });
    let asked = asked.into_inner();
    let mut args = vec!["reactstep".to_string()];
    for entry in container["env"].as_array().expect("the container has env") {
        let name = entry["name"].as_str().unwrap();
        if !name.starts_with("REACTSTEP_") {
            continue;
        }
        match (flags.get(name), entry["value"].as_str()) {
            (Some(long), Some(value)) => args.push(format!("--{long}={value}")),
            (Some(_), None) => assert!(
                entry.get("valueFrom").is_some(),
                "{name} has a string value or a valueFrom"
            ),
            (None, _) => assert!(asked.contains(name), "the service reads no {name}"),
        }
    }
    let matches = command
        .mut_args(|a| a.env(None::<&'static str>))
        .try_get_matches_from(&args)
        .unwrap_or_else(|e| panic!("the service refuses the Deployment's settings: {e}"));
    Config::from_arg_matches(&matches).unwrap()
}

fn env_entry<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn a_stopped_pod_finishes_its_steps_before_it_is_killed() {
    let manifests = manifests();
    let deployment = kind(&manifests, "Deployment");
    let container = container(deployment);
    let config = deployment_config(container);
    let pause = container
        .pointer("/lifecycle/preStop/sleep/seconds")
        .and_then(Value::as_u64)
        .expect("preStop sleeps");
    assert!(pause >= 5, "the pause lets the endpoint leave the Service");
    let grace = deployment
        .pointer("/spec/template/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_u64)
        .expect("terminationGracePeriodSeconds is set");
    assert!(
        grace > pause + config.shutdown_grace_secs,
        "terminationGracePeriodSeconds {grace} > preStop {pause} + REACTSTEP_SHUTDOWN_GRACE_SECS {}",
        config.shutdown_grace_secs
    );
    // A step in flight may last the whole step timeout, and still finishes.
    assert!(
        config.shutdown_grace_secs >= config.step_timeout_secs,
        "REACTSTEP_SHUTDOWN_GRACE_SECS {} covers REACTSTEP_STEP_TIMEOUT_SECS {}",
        config.shutdown_grace_secs,
        config.step_timeout_secs
    );
    // A rollout starts a new pod before it stops an old one.
    assert_eq!(
        deployment.pointer("/spec/strategy/rollingUpdate/maxUnavailable"),
        Some(&Value::from(0))
    );
}

#[test]
fn the_probes_and_ports_agree_with_the_service_and_the_image() {
    let manifests = manifests();
    let deployment = kind(&manifests, "Deployment");
    let container = container(deployment);
    let config = deployment_config(container);
    let ports = container["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "one port");
    let port = &ports[0];
    let number = port["containerPort"].as_u64().unwrap();
    assert_eq!(
        number,
        u64::from(config.bind.port()),
        "REACTSTEP_BIND's port"
    );
    assert!(
        config.bind.ip().is_unspecified(),
        "every address of the pod"
    );
    assert_eq!(
        number,
        u64::from(port_of(&Dockerfile::read().env("REACTSTEP_BIND"))),
        "the image's port"
    );
    // A probe's or the Service's port names the container port or gives its number.
    let is_the_port = |p: &Value| *p == port["name"] || p.as_u64() == Some(number);

    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(is_the_port(&get["port"]), "{probe} port {}", get["port"]);
    }

    let service = kind(&manifests, "Service");
    let service_ports = service["spec"]["ports"].as_array().unwrap();
    assert!(!service_ports.is_empty());
    for p in service_ports {
        assert!(
            is_the_port(&p["targetPort"]),
            "targetPort {}",
            p["targetPort"]
        );
    }
}

#[test]
fn the_deployments_token_comes_from_the_secret_whose_placeholder_cannot_start() {
    let manifests = manifests();
    let container = container(kind(&manifests, "Deployment"));
    let reference = env_entry(container, "REACTSTEP_API_TOKENS")
        .and_then(|e| e.pointer("/valueFrom/secretKeyRef"))
        .expect("REACTSTEP_API_TOKENS comes from a Secret");
    let secret = kind(&manifests, "Secret");
    assert_eq!(reference["name"], secret["metadata"]["name"]);
    let key = reference["key"].as_str().unwrap();
    let placeholder = secret["stringData"][key]
        .as_str()
        .unwrap_or_else(|| panic!("the Secret holds {key} in stringData"));
    assert!(
        placeholder.parse::<ApiTokens>().is_err(),
        "the placeholder {placeholder:?} is refused at start-up, so it is never deployed"
    );
    // What the placeholder stands for is accepted.
    assert!("0123456789abcdef0123456789abcdef"
        .parse::<ApiTokens>()
        .is_ok());
}

/// `labels` holds every pair of `selector`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("matchLabels");
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A resource quantity in milli-units (cpu) or bytes (memory), for the suffixes used here.
fn quantity(q: &Value) -> u64 {
    let text = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => panic!("quantity {q}"),
    };
    let (number, scale) = if let Some(n) = text.strip_suffix('m') {
        (n, 1)
    } else if let Some(n) = text.strip_suffix("Ki") {
        (n, 1 << 10)
    } else if let Some(n) = text.strip_suffix("Mi") {
        (n, 1 << 20)
    } else if let Some(n) = text.strip_suffix("Gi") {
        (n, 1 << 30)
    } else {
        (text.as_str(), 1000)
    };
    number.parse::<u64>().expect("a whole number") * scale
}

#[test]
fn the_autoscaler_budget_and_service_act_on_the_deployments_pods() {
    let manifests = manifests();
    let deployment = kind(&manifests, "Deployment");
    let name = &deployment["metadata"]["name"];
    let pod_labels = deployment
        .pointer("/spec/template/metadata/labels")
        .unwrap();
    assert!(selects(
        &deployment["spec"]["selector"]["matchLabels"],
        pod_labels
    ));
    assert!(
        deployment["spec"].get("replicas").is_none(),
        "the HPA owns the replica count"
    );

    let hpa = kind(&manifests, "HorizontalPodAutoscaler");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    let target = &hpa["spec"]["scaleTargetRef"];
    assert_eq!(target["apiVersion"], "apps/v1");
    assert_eq!(target["kind"], "Deployment");
    assert_eq!(&target["name"], name);
    let metrics = hpa["spec"]["metrics"].as_array().unwrap();
    assert!(metrics.iter().any(|m| m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && m["resource"]["target"]["type"] == "Utilization"));
    let min = hpa["spec"]["minReplicas"].as_u64().unwrap();
    let max = hpa["spec"]["maxReplicas"].as_u64().unwrap();
    assert!(min >= 2 && max >= min, "replicas {min}..={max}");

    // Utilization is a share of the request: the container must make one. Limits hold it.
    let resources = &container(deployment)["resources"];
    for resource in ["cpu", "memory"] {
        let request = quantity(&resources["requests"][resource]);
        let limit = quantity(&resources["limits"][resource]);
        assert!(
            request > 0 && request <= limit,
            "{resource}: {request} ≤ {limit}"
        );
    }

    // A drain may take a pod at the HPA's minimum, and leaves one serving.
    let pdb = kind(&manifests, "PodDisruptionBudget");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels));
    let down_at_min = match (
        pdb["spec"]["maxUnavailable"].as_u64(),
        pdb["spec"]["minAvailable"].as_u64(),
    ) {
        (Some(max_unavailable), None) => max_unavailable.min(min),
        (None, Some(min_available)) => min.saturating_sub(min_available),
        other => panic!("the budget gives maxUnavailable or minAvailable as a number: {other:?}"),
    };
    assert!(
        down_at_min >= 1 && down_at_min < min,
        "{down_at_min} of {min}"
    );

    let service = kind(&manifests, "Service");
    assert!(selects(&service["spec"]["selector"], pod_labels));
}

#[test]
fn the_container_runs_unprivileged_on_a_read_only_root() {
    let manifests = manifests();
    let deployment = kind(&manifests, "Deployment");
    let pod = deployment.pointer("/spec/template/spec").unwrap();
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["automountServiceAccountToken"], false);
    // The Service is called reactstep: no REACTSTEP_SERVICE_HOST and the like in the pods.
    assert_eq!(pod["enableServiceLinks"], false);
    let security = &container(deployment)["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(security["capabilities"].get("add").is_none());
}

#[test]
fn hadolint_finds_nothing_in_the_dockerfile() {
    let hadolint = tools().join("hadolint");
    let output = run(
        &hadolint,
        &[
            "--no-color",
            repo().join("deploy/Dockerfile").to_str().unwrap(),
        ],
    );
    assert!(output.status.success(), "hadolint:\n{}", shown(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "");

    // And it does find faults: an untagged image, an unpinned and unconfirmed install.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("Dockerfile");
    std::fs::write(&bad, "FROM debian\nRUN apt-get install curl\n").unwrap();
    let output = run(&hadolint, &["--no-color", bad.to_str().unwrap()]);
    assert!(!output.status.success(), "{}", shown(&output));
    let report = String::from_utf8_lossy(&output.stdout);
    for rule in ["DL3006", "DL3014"] {
        assert!(report.contains(rule), "{rule} in {report}");
    }
}

/// The binary cargo built, on a loopback port the kernel picks, until dropped.
struct Server {
    child: std::process::Child,
    port: u16,
}

impl Server {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reactstep"))
            .env("REACTSTEP_BIND", "127.0.0.1:0")
            .env("REACTSTEP_API_TOKENS", "0123456789abcdef0123456789abcdef")
            .env("REACTSTEP_LOG_FORMAT", "json")
            .env("REACTSTEP_WORKERS", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        // The start-up line, logged once the socket listens, carries the port.
        let port = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| serde_json::from_str::<Value>(&line).ok()?["port"].as_u64())
            .expect("the server logs its port at start-up");
        // Keep reading, so that the log never fills the pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Self {
            child,
            port: u16::try_from(port).unwrap(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HEALTHCHECK's command, run by `sh -c` with REACTSTEP_BIND set as in the container.
fn health_check(bind: &str) -> Output {
    Command::new("sh")
        .args(["-c", &Dockerfile::read().health_command()])
        .env("REACTSTEP_BIND", bind)
        .stdin(Stdio::null())
        .output()
        .expect("sh runs")
}

#[test]
fn the_health_check_passes_against_the_service_and_fails_without_it() {
    let curl = Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|o| o.status.success()),
        "the health check runs curl: install it (Debian: `apt-get install curl`), then run cargo test again"
    );
    let server = Server::start();
    let output = health_check(&format!("0.0.0.0:{}", server.port));
    assert!(output.status.success(), "{}", shown(&output));

    // Nothing listens there any more: Docker counts only status 1 as unhealthy.
    let port = server.port;
    drop(server);
    let output = health_check(&format!("0.0.0.0:{port}"));
    assert_eq!(output.status.code(), Some(1), "{}", shown(&output));
}
