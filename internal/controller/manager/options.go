// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/blockgc"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimaddrs"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
)

// Certificate modes for the webhook.
const (
	// CertsSelfManaged: the controller generates, rotates and injects its
	// own CA and serving certificate (no cert-manager needed).
	CertsSelfManaged = "self-managed"
	// CertsProvided: certificates are mounted into WebhookCertDir (for
	// example by cert-manager, which also injects the CA).
	CertsProvided = "provided"
)

// Options configure ipkeeper-controller.
type Options struct {
	Namespace string

	LeaderElect   bool
	LeaderElectID string
	MetricsAddr   string
	// MetricsCertDir, when set, serves /metrics over TLS with tls.crt and
	// tls.key from it; plain HTTP when empty.
	MetricsCertDir string
	ProbeAddr      string
	// ProfilingAddr, when set, serves Go's profiles (/debug/pprof/) there:
	// plain HTTP, unauthenticated, for a loopback address while
	// investigating.
	ProfilingAddr string
	APIQPS        float64
	APIBurst      int
	RequireGate   bool
	// ClaimsController is --claims-controller: who makes VMs' IPAMClaims
	// (claimmaker.Setting).
	ClaimsController         string
	ClaimsControllerInterval time.Duration
	GCGracePeriod            time.Duration
	BlockGrace               time.Duration
	ClaimResync              time.Duration
	MaxAddressRetention      time.Duration
	EnableWebhook            bool
	WebhookHost              string
	WebhookPort              int
	CertMode                 string
	CertDir                  string
	SecretName               string
	WebhookConfig            string
	ServiceName              string
	ExtraSANs                string
	CertValidity             time.Duration
	CAValidity               time.Duration

	ClaimWorkers int

	// TLS is --tls-min-version, --tls-cipher-suites,
	// --tls-curve-preferences and --enable-http2: the settings of every
	// TLS server the controller runs.
	TLS tlsconfig.Options

	KubeVirtDiscoveryInterval   time.Duration
	ClusterAPIDiscoveryInterval time.Duration
	WebhookLiveReadQPS          float64
}

// AddFlags registers the controller's flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = naming.DefaultNamespace
	}
	fs.StringVar(&o.Namespace, "namespace", ns, "namespace the controller runs in: its leader election lease and webhook Secret live here (default $POD_NAMESPACE)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader among replicas for the controllers; every replica serves the webhook")
	fs.StringVar(&o.LeaderElectID, "leader-election-id", naming.ControllerName, "name of the leader election Lease")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":9920", "address for Prometheus /metrics; 0 disables")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "serve /metrics over TLS with tls.crt and tls.key from this directory (reloaded when they change), with the --tls-* flags and --enable-http2; empty: plain HTTP")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":9921", "address for /healthz and /readyz; 0 disables")
	fs.StringVar(&o.ProfilingAddr, "profiling-bind-address", "", "serve Go's CPU and memory profiles (/debug/pprof/, plain HTTP, unauthenticated) on this address, e.g. 127.0.0.1:9922; empty disables")
	fs.Float64Var(&o.APIQPS, "kube-api-qps", 200, "API requests per second (sustained): the controller writes every VM's first addresses, so a VM boot storm is bounded by this")
	fs.IntVar(&o.APIBurst, "kube-api-burst", 400, "API requests in a burst")
	fs.IntVar(&o.ClaimWorkers, "claim-workers", claimaddrs.DefaultWorkers, "IPAMClaims whose addresses are chosen and recorded at once")
	fs.BoolVar(&o.RequireGate, "require-kubevirt-feature-gate", true, "act only while the KubeVirt CR lists the PersistentIPs feature gate; false: act as if it always did")
	fs.StringVar(&o.ClaimsController, "claims-controller", string(claimmaker.Auto), "who makes KubeVirt VMs' IPAMClaims and launcher claim references: ipkeeper; external (another controller, such as KubeVirt's ipam-extensions, makes them and ipkeeper fills their addresses); auto (external while a webhook named "+claimmaker.ExtensionsWebhook+" is registered, else ipkeeper)")
	fs.DurationVar(&o.ClaimsControllerInterval, "claims-controller-check-interval", 30*time.Second, "with --claims-controller=auto, how often the controller looks for another IPAMClaims controller's webhook")
	fs.DurationVar(&o.GCGracePeriod, "gc-grace-period", 2*time.Minute, "how long a pod must stay gone before the garbage collector releases its reservations")
	fs.DurationVar(&o.BlockGrace, "block-empty-grace", blockgc.DefaultGrace, "how long an address block must hold no reservation before it is given back to its pool")
	fs.DurationVar(&o.MaxAddressRetention, "max-address-retention", claims.DefaultMaxRetention, "the longest a VM may ask for its addresses to be kept after its claims are released (annotation "+claimstatus.RetentionAnnotation+"); longer requests are capped; 0 keeps none")
	fs.DurationVar(&o.ClaimResync, "claim-resync-period", 10*time.Minute, "how often every IPAMClaim ipkeeper manages is checked again without an event (a release interrupted by a crash is also resumed at start-up); 0 disables")
	fs.DurationVar(&o.KubeVirtDiscoveryInterval, "kubevirt-discovery-interval", 30*time.Second, "how often the controller checks whether KubeVirt's CRDs are installed (KubeVirt support starts and stops with them)")
	fs.DurationVar(&o.ClusterAPIDiscoveryInterval, "cluster-api-discovery-interval", 30*time.Second, "how often the controller checks whether Cluster API's IPAM CRDs are installed (the Cluster API IPAM provider starts and stops with them)")
	fs.Float64Var(&o.WebhookLiveReadQPS, "webhook-live-read-qps", 20, "API reads per second the webhook may make for objects its cache has not seen yet (bursts of twice that)")
	fs.BoolVar(&o.EnableWebhook, "enable-webhook", true, "serve the virt-launcher pod webhook")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "address the webhook listens on (all when empty)")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port the webhook listens on")
	fs.StringVar(&o.CertMode, "webhook-cert-mode", CertsSelfManaged, "self-managed: generate, rotate and inject certificates; provided: read them from --webhook-cert-dir (e.g. cert-manager)")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory with tls.crt and tls.key (provided mode)")
	fs.StringVar(&o.SecretName, "webhook-secret-name", "ipkeeper-webhook-cert", "Secret (in --namespace) that holds self-managed certificates")
	fs.StringVar(&o.WebhookConfig, "webhook-configuration-name", "ipkeeper", "MutatingWebhookConfiguration that gets the self-managed CA bundle")
	fs.StringVar(&o.ServiceName, "webhook-service-name", "ipkeeper-webhook", "Service in front of the webhook; its DNS names go into the certificate")
	fs.StringVar(&o.ExtraSANs, "webhook-extra-sans", "", "comma-separated extra DNS names or IPs for the self-managed certificate")
	o.TLS.AddFlags(fs, "the webhook server and, with --metrics-cert-dir, /metrics")
	fs.DurationVar(&o.CertValidity, "webhook-cert-validity", 365*24*time.Hour, "lifetime of a self-managed serving certificate (renewed at 2/3)")
	fs.DurationVar(&o.CAValidity, "webhook-ca-validity", 10*365*24*time.Hour, "lifetime of the self-managed CA (rotated at 2/3, without downtime)")
}

// Validate checks the options; errors name the flag and the value. It
// changes nothing.
func (o Options) Validate() error {
	if o.Namespace == "" {
		return fmt.Errorf("--namespace: must not be empty")
	}
	if _, err := claimmaker.ParseSetting(o.ClaimsController); err != nil {
		return err
	}
	if o.ClaimsControllerInterval <= 0 {
		return fmt.Errorf("--claims-controller-check-interval %s: must be positive", o.ClaimsControllerInterval)
	}
	if o.GCGracePeriod < 0 {
		return fmt.Errorf("--gc-grace-period %s: must not be negative", o.GCGracePeriod)
	}
	if o.BlockGrace < 0 {
		return fmt.Errorf("--block-empty-grace %s: must not be negative", o.BlockGrace)
	}
	if o.KubeVirtDiscoveryInterval <= 0 {
		return fmt.Errorf("--kubevirt-discovery-interval %s: must be positive", o.KubeVirtDiscoveryInterval)
	}
	if o.ClusterAPIDiscoveryInterval <= 0 {
		return fmt.Errorf("--cluster-api-discovery-interval %s: must be positive", o.ClusterAPIDiscoveryInterval)
	}
	if o.ClaimResync < 0 {
		return fmt.Errorf("--claim-resync-period %s: must not be negative", o.ClaimResync)
	}
	if o.MaxAddressRetention < 0 {
		return fmt.Errorf("--max-address-retention %s: must not be negative", o.MaxAddressRetention)
	}
	if o.ClaimWorkers < 0 {
		return fmt.Errorf("--claim-workers %d: must not be negative (0: the default, %d)", o.ClaimWorkers, claimaddrs.DefaultWorkers)
	}
	if o.APIQPS <= 0 || o.APIBurst <= 0 {
		return fmt.Errorf("--kube-api-qps %v / --kube-api-burst %d: must be positive", o.APIQPS, o.APIBurst)
	}
	if _, err := o.TLS.Parse(); err != nil {
		return err
	}
	if !o.EnableWebhook {
		return nil
	}
	if o.WebhookPort <= 0 || o.WebhookPort > 65535 {
		return fmt.Errorf("--webhook-port %d: must be 1-65535", o.WebhookPort)
	}
	if o.WebhookLiveReadQPS <= 0 {
		return fmt.Errorf("--webhook-live-read-qps %v: must be positive", o.WebhookLiveReadQPS)
	}
	switch o.CertMode {
	case CertsSelfManaged:
		if o.SecretName == "" || o.WebhookConfig == "" {
			return fmt.Errorf("--webhook-secret-name and --webhook-configuration-name are required with --webhook-cert-mode %s", CertsSelfManaged)
		}
		if o.CertValidity <= 0 || o.CAValidity < o.CertValidity {
			return fmt.Errorf("--webhook-cert-validity %s / --webhook-ca-validity %s: both positive, the CA at least as long", o.CertValidity, o.CAValidity)
		}
	case CertsProvided:
		if o.CertDir == "" {
			return fmt.Errorf("--webhook-cert-dir is required with --webhook-cert-mode %s", CertsProvided)
		}
	default:
		return fmt.Errorf("--webhook-cert-mode %q: want %s or %s", o.CertMode, CertsSelfManaged, CertsProvided)
	}
	return nil
}

// tlsSettings are the TLS flags parsed; Validate has checked them.
func (o *Options) tlsSettings() tlsconfig.Server {
	s, _ := o.TLS.Parse()
	return s
}

// sans splits the certificate's subject alternative names: the Service's
// DNS names plus --webhook-extra-sans.
func (o *Options) sans() (dns []string, ips []net.IP) {
	if o.ServiceName != "" {
		dns = append(dns, o.ServiceName+"."+o.Namespace+".svc", o.ServiceName+"."+o.Namespace+".svc.cluster.local", o.ServiceName+"."+o.Namespace)
	}
	for _, s := range strings.Split(o.ExtraSANs, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

// CommandOptions are ipkeeper-controller's whole command line: Options,
// and what main uses itself.
type CommandOptions struct {
	Options
	Kubeconfig  string
	LogLevel    string
	ShowVersion bool
}

// FlagSet registers every flag of ipkeeper-controller on a new flag set,
// bound to c. main parses the command line with it; the docs check
// (hack/docscheck) lists the flags from it.
func (c *CommandOptions) FlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("ipkeeper-controller", flag.ContinueOnError)
	c.AddFlags(fs)
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	return fs
}
