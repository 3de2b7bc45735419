//! floodgate as `/bin/ratelimit` in Envoy Gateway's rate limit Deployment: the container's
//! environment exactly as Envoy Gateway renders it
//! (`internal/infrastructure/kubernetes/ratelimit/testdata/deployments/default.yaml` at
//! d32f282), with only the paths and addresses that must point at a test's files and ports
//! replaced, and the `envoy-rate-limit` Secret's three files it mounts at `/certs`.

use std::path::{Path, PathBuf};

use crate::testca::TestCa;
use crate::xds::XdsServerTls;
use crate::{ratelimit_command, reference_listeners, repo_file, subdir, Running};

/// Envoy Gateway's `InfraName`, the node id it sets snapshots for.
pub const NODE: &str = "envoy-ratelimit";

/// The `envoy-rate-limit` Secret: one pair for the gRPC listener and for the client side of the
/// xDS connection (Envoy's certificate towards the service is signed by the same CA), written
/// to `dir/certs`.
pub struct Certs {
    pub ca: TestCa,
    dir: PathBuf,
}

impl Certs {
    pub fn write(dir: &Path) -> Self {
        let dir = subdir(dir, "certs");
        let ca = TestCa::new("envoy-gateway");
        let pair = ca.server_and_client();
        for (name, text) in [
            ("tls.crt", &pair.cert),
            ("tls.key", &pair.key),
            ("ca.crt", &ca.pem()),
        ] {
            std::fs::write(dir.join(name), text)
                .unwrap_or_else(|error| panic!("write {name}: {error}"));
        }
        Self { ca, dir }
    }

    /// The directory mounted at `/certs` in the pod.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `name`'s path (`tls.crt`, `tls.key`, `ca.crt`).
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Envoy Gateway's xDS server side: its own certificate of the same CA, and clients must
    /// present one (`RequireAndVerifyClientCert`).
    pub fn xds_server_tls(&self) -> XdsServerTls {
        let gateway = self.ca.server();
        XdsServerTls {
            cert_pem: gateway.cert,
            key_pem: gateway.key,
            client_ca_pem: Some(self.ca.pem()),
        }
    }
}

/// Where the pod's peers are, in a test.
pub struct Peers {
    /// The xDS server's port (`envoy-gateway:18001` in the cluster).
    pub xds_port: u16,
    /// Redis's port (`rateLimit.backend.redis.url`); `None` leaves the Redis variables out
    /// (the door's default store is Redis all the same: add `BACKEND_TYPE=memory`).
    pub redis_port: Option<u16>,
    /// Where Prometheus scrapes (`:19001` in the pod).
    pub prometheus_port: u16,
}

/// Envoy Gateway's environment, in its order: `data` is `RUNTIME_ROOT` (`/data`).
pub fn environment(data: &Path, certs: &Certs, peers: &Peers) -> Vec<(&'static str, String)> {
    let mapper = repo_file("tests/operations/fixtures/envoy-gateway/statsd_conf.yaml");
    let redis = peers.redis_port.map(|port| {
        [
            ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
            ("REDIS_URL", format!("127.0.0.1:{port}")),
        ]
    });
    let mut environment = vec![
        ("RUNTIME_ROOT", data.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
        ("RUNTIME_IGNOREDOTFILES", "true".to_owned()),
        ("RUNTIME_WATCH_ROOT", "false".to_owned()),
        ("LOG_LEVEL", "info".to_owned()),
        ("USE_STATSD", "false".to_owned()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
        (
            "CONFIG_GRPC_XDS_SERVER_URL",
            format!("127.0.0.1:{}", peers.xds_port),
        ),
        ("CONFIG_GRPC_XDS_NODE_ID", NODE.to_owned()),
        ("GRPC_SERVER_USE_TLS", "true".to_owned()),
        ("GRPC_SERVER_TLS_CERT", certs.path("tls.crt")),
        ("GRPC_SERVER_TLS_KEY", certs.path("tls.key")),
        ("GRPC_SERVER_TLS_CA_CERT", certs.path("ca.crt")),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", certs.path("tls.crt")),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", certs.path("tls.key")),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", certs.path("ca.crt")),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".to_owned()),
    ];
    environment.extend(redis.into_iter().flatten());
    environment.extend([
        ("USE_PROMETHEUS", "true".to_owned()),
        (
            "PROMETHEUS_ADDR",
            format!("127.0.0.1:{}", peers.prometheus_port),
        ),
        ("PROMETHEUS_MAPPER_YAML", mapper.display().to_string()),
    ]);
    environment
}

/// `ratelimit` (a link in `dir`) with nothing inherited but `environment`, and the listeners
/// on free loopback ports (8081, 8080 and 6070 in the pod): the process, not waited for, and
/// its gRPC, HTTP and debug ports.
pub fn spawn(dir: &Path, environment: &[(&str, String)]) -> (Running, (u16, u16, u16)) {
    let (mut command, ports) = ratelimit_command(dir);
    command.env_clear();
    reference_listeners(&mut command, ports);
    command.envs(
        environment
            .iter()
            .map(|(name, value)| (*name, value.as_str())),
    );
    (Running::spawn("ratelimit", &mut command, dir), ports)
}
