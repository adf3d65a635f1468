// SPDX-License-Identifier: Apache-2.0

// Package certs lets the ipkeeper-controller manage the TLS material of its
// mutating admission webhook itself ("self-managed" mode), so a cluster does
// not need cert-manager just to run ipkeeper.
//
// Two parts split the work between controller replicas:
//
//   - Rotator (leader only) keeps a Secret holding a CA (ca.crt, ca.key) and a
//     serving certificate signed by it (tls.crt, tls.key), renews each when
//     less than a third of its lifetime remains, and copies ca.crt into the
//     caBundle of every webhook of a MutatingWebhookConfiguration. Writes use
//     resourceVersion preconditions, so during a leader handover the API
//     server, not the replicas, decides which write wins.
//   - Server (every replica) serves whatever serving certificate the Secret
//     currently holds, so replicas never need to agree on anything locally.
//
// Renewing the CA is done in two phases so the API server never sees a
// serving certificate it does not trust:
//
//  1. A new CA is generated; ca.crt becomes "new CA + previous CAs that have
//     not expired" and is injected into the webhook configuration, while the
//     old serving certificate (signed by the old CA, still in the bundle)
//     keeps being served.
//  2. Only on a later reconcile, once the webhook configuration's caBundle is
//     seen to contain the new CA, is the serving certificate re-issued from
//     the new CA. Expired CAs drop out of the bundle on their own.
//
// ca.key always holds the key of the newest CA, which is always the first
// certificate of ca.crt.
package certs
