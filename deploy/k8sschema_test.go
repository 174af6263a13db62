package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The Kubernetes API fields the manifests use, named as in the API
// (k8s.io/api), so that decoding them with unknown fields refused catches
// a misspelt or misplaced field, which kubectl would reject (or, with
// validation off, silently drop). Only the fields these manifests need are
// here: a new field must be added, from the API reference, with its type.
type (
	k8sMeta struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	k8sSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	k8sObject struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Metadata   k8sMeta           `yaml:"metadata"`
		Data       map[string]string `yaml:"data"` // ConfigMap
		Spec       yaml.Node         `yaml:"spec"` // decoded by kind
	}
	k8sStatefulSetSpec struct {
		ServiceName         string `yaml:"serviceName"`
		Replicas            int32  `yaml:"replicas"`
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		UpdateStrategy      struct {
			Type          string `yaml:"type"`
			RollingUpdate *struct {
				Partition      *int32 `yaml:"partition"`
				MaxUnavailable *int32 `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"updateStrategy"`
		Selector k8sSelector `yaml:"selector"`
		Template struct {
			Metadata k8sMeta    `yaml:"metadata"`
			Spec     k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				AccessModes      []string     `yaml:"accessModes"`
				StorageClassName *string      `yaml:"storageClassName"`
				Resources        k8sResources `yaml:"resources"`
			} `yaml:"spec"`
		} `yaml:"volumeClaimTemplates"`
	}
	k8sResources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	}
	k8sAffinityTerm struct {
		LabelSelector k8sSelector `yaml:"labelSelector"`
		TopologyKey   string      `yaml:"topologyKey"`
	}
	k8sPodSpec struct {
		TerminationGracePeriodSeconds *int64 `yaml:"terminationGracePeriodSeconds"`
		EnableServiceLinks            *bool  `yaml:"enableServiceLinks"`
		SecurityContext               struct {
			RunAsNonRoot        *bool  `yaml:"runAsNonRoot"`
			RunAsUser           *int64 `yaml:"runAsUser"`
			RunAsGroup          *int64 `yaml:"runAsGroup"`
			FSGroup             *int64 `yaml:"fsGroup"`
			FSGroupChangePolicy string `yaml:"fsGroupChangePolicy"`
			SeccompProfile      struct {
				Type string `yaml:"type"`
			} `yaml:"seccompProfile"`
		} `yaml:"securityContext"`
		Affinity struct {
			PodAntiAffinity struct {
				Required  []k8sAffinityTerm `yaml:"requiredDuringSchedulingIgnoredDuringExecution"`
				Preferred []struct {
					Weight          int32           `yaml:"weight"`
					PodAffinityTerm k8sAffinityTerm `yaml:"podAffinityTerm"`
				} `yaml:"preferredDuringSchedulingIgnoredDuringExecution"`
			} `yaml:"podAntiAffinity"`
		} `yaml:"affinity"`
		TopologySpreadConstraints []struct {
			MaxSkew           int32       `yaml:"maxSkew"`
			TopologyKey       string      `yaml:"topologyKey"`
			WhenUnsatisfiable string      `yaml:"whenUnsatisfiable"`
			LabelSelector     k8sSelector `yaml:"labelSelector"`
		} `yaml:"topologySpreadConstraints"`
		RestartPolicy string         `yaml:"restartPolicy"`
		Containers    []k8sContainer `yaml:"containers"`
		Volumes       []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
			Secret *struct {
				SecretName  string `yaml:"secretName"`
				DefaultMode *int32 `yaml:"defaultMode"`
			} `yaml:"secret"`
			PersistentVolumeClaim *struct {
				ClaimName string `yaml:"claimName"`
				ReadOnly  bool   `yaml:"readOnly"`
			} `yaml:"persistentVolumeClaim"`
		} `yaml:"volumes"`
	}
	k8sProbe struct {
		HTTPGet struct {
			Scheme string `yaml:"scheme"`
			Path   string `yaml:"path"`
			Port   string `yaml:"port"`
		} `yaml:"httpGet"`
		InitialDelaySeconds int32 `yaml:"initialDelaySeconds"`
		PeriodSeconds       int32 `yaml:"periodSeconds"`
		TimeoutSeconds      int32 `yaml:"timeoutSeconds"`
		FailureThreshold    int32 `yaml:"failureThreshold"`
	}
	k8sContainer struct {
		Name            string   `yaml:"name"`
		Image           string   `yaml:"image"`
		ImagePullPolicy string   `yaml:"imagePullPolicy"`
		Command         []string `yaml:"command"`
		Args            []string `yaml:"args"`
		Env             []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int32  `yaml:"containerPort"`
		} `yaml:"ports"`
		StartupProbe    *k8sProbe    `yaml:"startupProbe"`
		LivenessProbe   *k8sProbe    `yaml:"livenessProbe"`
		ReadinessProbe  *k8sProbe    `yaml:"readinessProbe"`
		Resources       k8sResources `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	k8sServiceSpec struct {
		Type                     string            `yaml:"type"`
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []struct {
			Name       string `yaml:"name"`
			Port       int32  `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	}
	// batch/v1 CronJob, and the PersistentVolumeClaim its job writes to.
	k8sCronJobSpec struct {
		Schedule                   string  `yaml:"schedule"`
		TimeZone                   *string `yaml:"timeZone"`
		ConcurrencyPolicy          string  `yaml:"concurrencyPolicy"`
		StartingDeadlineSeconds    *int64  `yaml:"startingDeadlineSeconds"`
		Suspend                    *bool   `yaml:"suspend"`
		SuccessfulJobsHistoryLimit *int32  `yaml:"successfulJobsHistoryLimit"`
		FailedJobsHistoryLimit     *int32  `yaml:"failedJobsHistoryLimit"`
		JobTemplate                struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				BackoffLimit            *int32 `yaml:"backoffLimit"`
				ActiveDeadlineSeconds   *int64 `yaml:"activeDeadlineSeconds"`
				TTLSecondsAfterFinished *int32 `yaml:"ttlSecondsAfterFinished"`
				Template                struct {
					Metadata k8sMeta    `yaml:"metadata"`
					Spec     k8sPodSpec `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"`
	}
	k8sPVCSpec struct {
		AccessModes      []string     `yaml:"accessModes"`
		StorageClassName *string      `yaml:"storageClassName"`
		Resources        k8sResources `yaml:"resources"`
	}
	k8sPDBSpec struct {
		MaxUnavailable int32       `yaml:"maxUnavailable"`
		Selector       k8sSelector `yaml:"selector"`
	}
	// networking.k8s.io/v1 NetworkPolicy. A port is a number or a
	// container port's name (IntOrString); these manifests use names.
	k8sNetworkPolicyPeer struct {
		PodSelector       *k8sSelector `yaml:"podSelector"`
		NamespaceSelector *k8sSelector `yaml:"namespaceSelector"`
		IPBlock           *struct {
			CIDR   string   `yaml:"cidr"`
			Except []string `yaml:"except"`
		} `yaml:"ipBlock"`
	}
	k8sNetworkPolicyPort struct {
		Protocol string `yaml:"protocol"`
		Port     string `yaml:"port"`
		EndPort  *int32 `yaml:"endPort"`
	}
	k8sNetworkPolicySpec struct {
		PodSelector k8sSelector `yaml:"podSelector"`
		PolicyTypes []string    `yaml:"policyTypes"`
		Ingress     []struct {
			From  []k8sNetworkPolicyPeer `yaml:"from"`
			Ports []k8sNetworkPolicyPort `yaml:"ports"`
		} `yaml:"ingress"`
		Egress []struct {
			To    []k8sNetworkPolicyPeer `yaml:"to"`
			Ports []k8sNetworkPolicyPort `yaml:"ports"`
		} `yaml:"egress"`
	}
)

// strictDecode decodes src into v, refusing fields v does not have.
func strictDecode(src []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// checkManifest decodes every object of a manifest file strictly; it
// returns one problem per object that does not fit the API fields.
func checkManifest(path string, src []byte) []string {
	var problems []string
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for n := 1; ; n++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return problems
		}
		if err != nil {
			return append(problems, path+": "+err.Error())
		}
		raw, err := yaml.Marshal(&doc)
		if err != nil {
			return append(problems, path+": "+err.Error())
		}
		var obj k8sObject
		if err := strictDecode(raw, &obj); err != nil {
			problems = append(problems, path+": "+err.Error())
			continue
		}
		var spec any
		switch obj.Kind {
		case "StatefulSet":
			spec = &k8sStatefulSetSpec{}
		case "Service":
			spec = &k8sServiceSpec{}
		case "PodDisruptionBudget":
			spec = &k8sPDBSpec{}
		case "CronJob":
			spec = &k8sCronJobSpec{}
		case "PersistentVolumeClaim":
			spec = &k8sPVCSpec{}
		case "NetworkPolicy":
			spec = &k8sNetworkPolicySpec{}
		case "ConfigMap", "Namespace":
			if obj.Spec.Kind != 0 {
				problems = append(problems, path+": a "+obj.Kind+" has no spec")
			}
			continue
		default:
			problems = append(problems, path+": kind "+obj.Kind+" is not described in this test")
			continue
		}
		specRaw, err := yaml.Marshal(&obj.Spec)
		if err == nil {
			err = strictDecode(specRaw, spec)
		}
		if err != nil {
			problems = append(problems, path+": "+obj.Kind+"/"+obj.Metadata.Name+" spec: "+err.Error())
		}
	}
}

func TestKubernetesManifestsUseOnlyAPIFields(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*.yaml")
	checked := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkManifest(f, src) {
			t.Error(p)
		}
		checked++
	}
	if checked < 6 {
		t.Fatalf("checked %d manifests", checked)
	}
	// And the check catches a misspelt or misplaced field.
	sts, _ := os.ReadFile("kubernetes/statefulset.yaml")
	for _, typo := range [][2]string{{"readinessProbe:", "readinesProbe:"}, {"podManagementPolicy:", "podManagmentPolicy:"},
		{"      terminationGracePeriodSeconds:", "      terminationGracePeriod:"}, {"containerPort: 7001", "containerPort: seven"}} {
		bad := strings.Replace(string(sts), typo[0], typo[1], 1)
		if bad == string(sts) {
			t.Fatalf("%q not in statefulset.yaml", typo[0])
		}
		if p := checkManifest("statefulset.yaml", []byte(bad)); len(p) == 0 {
			t.Errorf("the typo %s -> %s went unnoticed", typo[0], typo[1])
		}
	}
}
