// Command kstatus prints how GitOps tools judge a resource's health: the status that
// sigs.k8s.io/cli-utils' kstatus (as Flux and kpt use it) computes for each object read from
// standard input, as `kubectl get -o json` prints it (one object, or a List of them). One line
// per object: `<namespace>/<name> <status> <message>`, the status one of InProgress, Failed,
// Current, Terminating, NotFound or Unknown.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	// apimachinery's decoder reads whole numbers as int64, as kstatus expects of generations.
	var obj map[string]interface{}
	if err := json.Unmarshal(raw, &obj); err != nil {
		fail(err)
	}
	items := []map[string]interface{}{obj}
	if list, ok := obj["items"].([]interface{}); ok {
		items = items[:0]
		for _, item := range list {
			if m, ok := item.(map[string]interface{}); ok {
				items = append(items, m)
			}
		}
	}
	for _, item := range items {
		u := &unstructured.Unstructured{Object: item}
		res, err := status.Compute(u)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s/%s %s %s\n", u.GetNamespace(), u.GetName(), res.Status, res.Message)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kstatus:", err)
	os.Exit(1)
}
