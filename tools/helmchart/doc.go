// Package helmchart holds the tests of gantry's Helm chart
// (deploy/helm/gantry): it is linted and rendered in-process with Helm's
// own packages, as `helm lint` and `helm template` do, and every rendered
// object is decoded strictly into its Kubernetes API type. It lives in the
// tools module so that Helm's and Kubernetes' packages stay out of gantry's
// own module.
package helmchart
