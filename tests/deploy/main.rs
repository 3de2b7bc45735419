//! The deployment files in `deploy/`: the Kubernetes manifests and the Grafana dashboard, checked
//! against a live floodgate.

mod deploy_dashboard;
mod deploy_manifests;
